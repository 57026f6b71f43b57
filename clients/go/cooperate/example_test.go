package cooperate_test

import (
	"errors"
	"log"
	"net/http"
	"time"

	client "github.com/sluice-rl/sluice/clients/go"
	"github.com/sluice-rl/sluice/clients/go/cooperate"
)

// Every process that calls the partner's API, on any machine, builds the
// same Shared: one budget in sluice, "cooperate:partner.example.com",
// paces them all at the partner's 10 a second. (Compiled, not run: it
// needs sluice and the partner.)
func ExampleShared() {
	nodes, err := client.NewNodes(client.NodesConfig{Addrs: []string{"dns:sluice.default.svc:6380"}})
	if err != nil {
		log.Fatal(err)
	}
	defer nodes.Close()
	hc := &http.Client{Transport: &cooperate.Shared{
		Client:  client.New(nodes),
		Limit:   client.Limit{Rate: 10, Burst: 1}, // the partner's 10/s; its burst of 10 absorbs 0.9 s of latency
		MaxWait: 2 * time.Second,
		// While sluice cannot be reached, send anyway, paced by the
		// partner's own headers.
		FailOpen: true,
		Base:     &cooperate.Transport{MaxWait: 2 * time.Second},
	}}
	resp, err := hc.Get("https://partner.example.com/v1/quotes")
	var lim *cooperate.LimitedError
	switch {
	case errors.As(err, &lim):
		log.Printf("not sent: the shared budget has no room for %v", lim.Wait)
	case err != nil:
		log.Print(err)
	default:
		resp.Body.Close()
	}
}
