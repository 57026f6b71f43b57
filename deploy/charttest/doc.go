// Package charttest renders the Helm chart in deploy/helm/sluice with
// Helm's Go SDK and checks what it makes (helm_test.go). It is a module of
// its own so that Helm and the Kubernetes libraries, which only this test
// needs, stay out of the server's module graph (they would raise the
// bbolt version the Raft store is built with).
package charttest
