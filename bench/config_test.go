package main

import (
	"errors"
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseArgsDefaults(t *testing.T) {
	c, err := parseArgs(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Targets: []string{"127.0.0.1:6380"}, Conns: 50, Pipeline: 1, Requests: 100000,
		KeySpace: 100000, Dist: "uniform", ZipfS: 1.1, Mix: Mix{kindAcquire: 100},
		Rate: 100, Burst: 100, Partners: 10, Tenants: 10, Seed: 1,
		Timeout: 10 * time.Second, ThrottlePer: 1, Domain: "bench", Descriptors: 1,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestParseArgsValues(t *testing.T) {
	c, err := parseArgs([]string{
		"-h", "10.0.0.1:6380,10.0.0.2:6380", "-h", "[::1]:7000", "-a", "pw", "--user", "ops",
		"-c", "8", "-P", "16", "-d", "5", "-r", "1000", "--dist", "zipf", "--zipf-s", "1.5",
		"--mix", "acquire=90, throttle=5,budget=5,budget-write=0", "--rate", "10", "--burst", "20",
		"--per", "minute", "--algo", "gcra", "--tree-partners", "3", "--tree-tenants", "4",
		"--seed", "-7", "--rate-limit", "5000", "--timeout", "2s", "--json",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Targets: []string{"10.0.0.1:6380", "10.0.0.2:6380", "[::1]:7000"}, Password: "pw", User: "ops",
		Conns: 8, Pipeline: 16, Duration: 5 * time.Second, KeySpace: 1000, Dist: "zipf", ZipfS: 1.5,
		Mix: Mix{kindAcquire: 90, kindThrottle: 5, kindBudget: 5}, Rate: 10, Burst: 20, Per: "minute",
		Algo: "gcra", Partners: 3, Tenants: 4, Seed: -7, RateLimit: 5000, Timeout: 2 * time.Second,
		JSON: true, ThrottlePer: 60, Domain: "bench", Descriptors: 1,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("parsed:\n got %+v\nwant %+v", c, want)
	}
}

func TestParseArgsDuration(t *testing.T) {
	for arg, want := range map[string]time.Duration{"30": 30 * time.Second, "1m30s": 90 * time.Second, "250ms": 250 * time.Millisecond} {
		c, err := parseArgs([]string{"-d", arg}, io.Discard)
		if err != nil {
			t.Errorf("-d %s: %v", arg, err)
			continue
		}
		if c.Duration != want || c.Requests != 0 {
			t.Errorf("-d %s: duration %v requests %d, want %v and 0", arg, c.Duration, c.Requests, want)
		}
	}
}

// Every bad value is refused with an error that names the flag and, for
// numbers, the accepted range.
func TestParseArgsErrors(t *testing.T) {
	cases := []struct {
		args []string
		want []string // substrings of the error
	}{
		{[]string{"-c", "0"}, []string{"-c", "between 1 and 4096"}},
		{[]string{"-c", "lots"}, []string{"-c", "between 1 and 4096"}},
		{[]string{"-P", "10001"}, []string{"-P", "between 1 and 10000"}},
		{[]string{"-n", "0"}, []string{"-n", "between 1 and"}},
		{[]string{"-r", "0"}, []string{"-r", "between 1 and"}},
		{[]string{"-r", "-5"}, []string{"-r", "between 1 and"}},
		{[]string{"--rate", "0"}, []string{"-rate", "between 1 and"}},
		{[]string{"--burst", "x"}, []string{"-burst", "between 1 and"}},
		{[]string{"--rate-limit", "-1"}, []string{"-rate-limit", "between 0 and"}},
		{[]string{"--tree-partners", "0"}, []string{"-tree-partners", "between 1 and"}},
		{[]string{"--mix", "budget=1", "--tree-partners", "1001", "--tree-tenants", "1000"}, []string{"--tree-partners × --tree-tenants", "at most 1000000"}},
		{[]string{"--zipf-s", "1"}, []string{"-zipf-s", "greater than 1", "at most 10"}},
		{[]string{"--zipf-s", "0.5"}, []string{"-zipf-s", "greater than 1"}},
		{[]string{"--dist", "normal"}, []string{"--dist", "uniform or zipf"}},
		{[]string{"-h", "localhost"}, []string{"-h", "host:port"}},
		{[]string{"-h", "a:1,b:99999"}, []string{"-h", "between 1 and 65535"}},
		{[]string{"-n", "5", "-d", "5s"}, []string{"-n and -d are exclusive"}},
		{[]string{"-d", "soon"}, []string{"-d", "between 1ms and 24h0m0s"}},
		{[]string{"-d", "0s"}, []string{"-d", "between 1ms and 24h0m0s"}},
		{[]string{"--timeout", "2h"}, []string{"--timeout", "between 1ms and 1h0m0s"}},
		{[]string{"--per", "fortnight"}, []string{"--per", "second, minute"}},
		{[]string{"--per", "0s"}, []string{"--per", "between 1ms and 3650d"}},
		{[]string{"--per", "250ms", "--mix", "throttle=1"}, []string{"--per", "whole number of seconds", "throttle"}},
		{[]string{"--algo", "magic"}, []string{"--algo", "token_bucket"}},
		{[]string{"--mix", "evalsha=1"}, []string{"--evalsha", "40-hex-digit"}},
		{[]string{"--mix", "evalsha=1", "--evalsha", "abc"}, []string{"--evalsha", "40-hex-digit"}},
		{[]string{"--user", "ops"}, []string{"--user", "-a"}},
		{[]string{"--mix", "acquire=0"}, []string{"--mix", "positive weight"}},
		{[]string{"--bogus"}, []string{"bogus"}},
		{[]string{"extra"}, []string{"unexpected argument", "extra"}},
	}
	for _, tc := range cases {
		_, err := parseArgs(tc.args, io.Discard)
		if err == nil {
			t.Errorf("%q: no error", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: error %q does not mention %q", tc.args, err, w)
			}
		}
	}
}

func TestParseArgsThrottleWholeSeconds(t *testing.T) {
	c, err := parseArgs([]string{"--per", "2m", "--mix", "throttle=1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.ThrottlePer != 120 {
		t.Errorf("throttle period %d, want 120", c.ThrottlePer)
	}
	if _, err := parseArgs([]string{"--per", "7d"}, io.Discard); err != nil {
		t.Errorf("--per 7d: %v", err)
	}
}

func TestParseArgsHelp(t *testing.T) {
	var out strings.Builder
	_, err := parseArgs([]string{"--help"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: error %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-h host:port", "-rate-limit", "-zipf-s", "-mix", "budget-write"} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("usage does not mention %q:\n%s", f, out.String())
		}
	}
}

// A bad flag exits 2 with one line naming it and a pointer to --help.
func TestRunBadFlagExitStatus(t *testing.T) {
	var stderr strings.Builder
	if code := run([]string{"-c", "0"}, io.Discard, &stderr); code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "-c") || !strings.Contains(stderr.String(), "--help") {
		t.Errorf("stderr %q", stderr.String())
	}
}
