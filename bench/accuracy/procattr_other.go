//go:build !linux

package main

import "syscall"

// childAttr is nil where the system cannot tie a child's life to ours.
func childAttr() *syscall.SysProcAttr { return nil }
