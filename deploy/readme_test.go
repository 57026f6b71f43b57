package deploy_test

import (
	"regexp"
	"testing"
)

// deploy/README.md: its flags and variables are real, and its table of
// the compose cluster's nodes is docker-compose.yml's.
func TestReadme(t *testing.T) {
	const file = "deploy/README.md"
	src := read(t, file)
	checkEnvNames(t, file, src, composeVars)
	other := append(healthcheckFlags(t), "build", "build-arg", "profile", "system", "no-create-home", "shell", "now")
	checkFlags(t, file, src, other...)

	cf := loadCompose(t)
	rowRE := regexp.MustCompile(`(?m)^\| (\S+) \((\S+)\) \| localhost:(\d+) \| localhost:(\d+) \| (\S+) \|$`)
	rows := rowRE.FindAllStringSubmatch(src, -1)
	if len(rows) != len(cf.nodes) {
		t.Fatalf("%s: the node table has %d rows, docker-compose.yml %d nodes", file, len(rows), len(cf.nodes))
	}
	for _, r := range rows {
		var n *composeNode
		for i := range cf.nodes {
			if cf.nodes[i].service == r[1] {
				n = &cf.nodes[i]
			}
		}
		if n == nil {
			t.Errorf("%s: %s is not a sluice service of docker-compose.yml", file, r[1])
			continue
		}
		published := map[string]string{} // container port → host port
		for _, p := range n.svc.published(t, r[1]) {
			published[p.container] = p.host
		}
		resp, httpPort := portOf(t, file, n.cfg.RespAddr), portOf(t, file, n.cfg.HTTPAddr)
		if r[2] != n.cfg.NodeID || r[3] != published[resp] || r[4] != published[httpPort] || r[5] != n.cfg.RaftAddr {
			t.Errorf("%s: row %q; docker-compose.yml has %s (%s) on localhost:%s and localhost:%s, Raft %s",
				file, r[0], r[1], n.cfg.NodeID, published[resp], published[httpPort], n.cfg.RaftAddr)
		}
	}
}
