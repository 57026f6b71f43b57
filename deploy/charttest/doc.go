// Package charttest renders the Helm chart in deploy/helm/sluice with
// Helm's Go SDK and checks what it makes (helm_test.go), lints it as
// `helm lint --strict` does, checks values.schema.json, the Secret kept
// across renders and the chart's files (chart_test.go), and loads
// docker-compose.yml as Compose v2 does, with compose-go
// (compose_test.go). It is a module of its own so that Helm, the
// Kubernetes libraries and compose-go, which only these tests need, stay
// out of the server's module graph (they would raise the bbolt version
// the Raft store is built with).
package charttest
