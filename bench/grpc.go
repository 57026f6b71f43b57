package main

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// grpcUnit is the Envoy unit of --per ("" is a second).
func grpcUnit(per string) (typev3.RateLimitUnit, bool) {
	switch per {
	case "", "second":
		return typev3.RateLimitUnit_SECOND, true
	case "minute":
		return typev3.RateLimitUnit_MINUTE, true
	case "hour":
		return typev3.RateLimitUnit_HOUR, true
	case "day":
		return typev3.RateLimitUnit_DAY, true
	}
	return 0, false
}

// executeGRPC runs a --grpc run: -c client connections, each with -P
// goroutines calling ShouldRateLimit one after another, so that -c × -P
// calls are in flight. Each goroutine keeps its own tallies (a worker
// without a RESP connection), merged as a RESP run's are.
func executeGRPC(ctx context.Context, c Config) (*Result, error) {
	res := newResult(&c)
	unit, _ := grpcUnit(c.Per)
	var conns []*grpc.ClientConn
	defer func() {
		for _, cc := range conns {
			cc.Close()
		}
	}()
	for i := 0; i < c.Conns; i++ {
		cc, err := grpc.NewClient(c.Targets[i%len(c.Targets)], grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, cc)
	}
	callCtx := ctx
	if c.Password != "" {
		auth := "Bearer " + c.Password
		if c.User != "" {
			auth = "Basic " + basicAuth(c.User, c.Password)
		}
		callCtx = metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	r := &runState{cfg: c, stopCh: make(chan struct{})}
	var workers []*worker
	for i := range conns {
		for j := 0; j < c.Pipeline; j++ {
			workers = append(workers, newWorker(len(workers), c.Targets[i%len(c.Targets)], nil, &c))
		}
	}
	r.start = time.Now()
	r.deadline = r.start.Add(c.Duration)
	var wg sync.WaitGroup
	for i, w := range workers {
		client := rlsv3.NewRateLimitServiceClient(conns[i/c.Pipeline])
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loopGRPC(callCtx, r, client, unit)
		}()
	}
	wg.Wait()
	res.Interrupted = ctx.Err() != nil
	res.add(workers, time.Since(r.start))
	return res, nil
}

// loopGRPC calls ShouldRateLimit until the requests, the time or the run
// are over.
func (w *worker) loopGRPC(ctx context.Context, r *runState, client rlsv3.RateLimitServiceClient, unit typev3.RateLimitUnit) {
	c := &r.cfg
	req := &rlsv3.RateLimitRequest{Domain: c.Domain}
	entries := make([]*rlcommon.RateLimitDescriptor_Entry, c.Descriptors)
	for i := range entries {
		entries[i] = &rlcommon.RateLimitDescriptor_Entry{Key: "key"}
		d := &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{entries[i]}}
		if !c.NoOverride {
			d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: uint32(min(c.Rate, 1<<32-1)), Unit: unit}
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	buf := make([]byte, 0, 32)
	for ctx.Err() == nil {
		if c.Requests > 0 && r.claimed.Add(1) > c.Requests {
			return
		}
		t0 := time.Now()
		if c.Duration > 0 && !t0.Before(r.deadline) {
			return
		}
		for _, e := range entries {
			buf = strconv.AppendUint(append(buf[:0], "key:"...), w.keys.next(), 10)
			e.Value = string(buf)
		}
		cctx, cancel := context.WithTimeout(ctx, c.Timeout)
		resp, err := client.ShouldRateLimit(cctx, req)
		cancel()
		record(w.hist, time.Since(t0))
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return
			}
			w.counts[outError]++
			st := status.Convert(err)
			w.errs.add(groupText([]byte(st.Message())))
			w.codes.add([]byte(st.Code().String()))
		case resp.OverallCode == rlsv3.RateLimitResponse_OK:
			w.counts[outAdmitted]++
		default:
			w.counts[outDenied]++
		}
	}
}

func basicAuth(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
