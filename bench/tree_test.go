package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"sort"
	"testing"
)

func TestTreeJSON(t *testing.T) {
	doc, err := treeJSON(2, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Budgets map[string]map[string]any `json:"budgets"`
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("not valid JSON: %v\n%s", err, doc)
	}
	var paths []string
	for p := range got.Budgets {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	wantPaths := []string{"system", "system/p0", "system/p0/t0", "system/p0/t1", "system/p0/t2",
		"system/p1", "system/p1/t0", "system/p1/t1", "system/p1/t2"}
	if !reflect.DeepEqual(paths, wantPaths) {
		t.Errorf("paths %v, want %v", paths, wantPaths)
	}

	// The exact shape of each level.
	want := map[string]string{
		"system":       `{"sharing":"enforce","sustained":{"rate":1000000,"window":"second"},"burst":{"capacity":1000000}}`,
		"system/p1":    `{"sharing":"enforce","sustained":{"rate":100000,"window":"second"}}`,
		"system/p1/t2": `{"sustained":{"rate":1000,"window":"second"},"scope":"user"}`,
	}
	var raw struct {
		Budgets map[string]json.RawMessage `json:"budgets"`
	}
	if err := json.Unmarshal(doc, &raw); err != nil {
		t.Fatal(err)
	}
	for p, w := range want {
		if string(raw.Budgets[p]) != w {
			t.Errorf("%s: %s, want %s", p, raw.Budgets[p], w)
		}
	}
	if !bytes.HasPrefix(doc, []byte(`{"budgets":{"system":{"sharing":"enforce"`)) {
		t.Errorf("document starts %.60s", doc)
	}

	// The same arguments give the same bytes.
	again, _ := treeJSON(2, 3)
	if !bytes.Equal(doc, again) {
		t.Error("treeJSON is not deterministic")
	}
}

func TestTreeJSONSize(t *testing.T) {
	doc, err := treeJSON(10, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got budgetTree
	if err := json.Unmarshal(doc, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Budgets) != 1+10+100 {
		t.Errorf("%d nodes, want 111", len(got.Budgets))
	}
	if c := got.Budgets[tenantPath(9, 9)]; c.Scope != "user" || c.Sustained == nil || c.Sustained.Rate != tenantRate {
		t.Errorf("system/p9/t9 = %+v", c)
	}
}

// Every drawn key addresses a tenant of the tree, and consecutive keys walk
// all of them.
func TestBudgetTarget(t *testing.T) {
	const partners, tenants = 3, 4
	seen := map[string]int{}
	for k := uint64(0); k < 2*partners*tenants; k++ {
		p, tn := budgetTarget(k, partners, tenants)
		if p < 0 || p >= partners || tn < 0 || tn >= tenants {
			t.Fatalf("key %d → p%d/t%d, outside the tree", k, p, tn)
		}
		seen[tenantPath(p, tn)]++
	}
	if len(seen) != partners*tenants {
		t.Errorf("%d tenants addressed, want %d", len(seen), partners*tenants)
	}
	for path, n := range seen {
		if n != 2 {
			t.Errorf("%s addressed %d times, want 2", path, n)
		}
	}
	if p, tn := budgetTarget(1<<63+5, partners, tenants); tenantPath(p, tn) != tenantPath(0, 1) {
		// (2^63+5) mod 12 = 8+5 mod 12 = 1
		t.Errorf("large key → %s, want system/p0/t1", tenantPath(p, tn))
	}
}
