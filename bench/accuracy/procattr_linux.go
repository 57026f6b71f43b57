package main

import "syscall"

// childAttr makes a node die with the tool, even if the tool is killed
// without a chance to stop its nodes.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
