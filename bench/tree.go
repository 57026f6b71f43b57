package main

import (
	"encoding/json"
	"strconv"
)

// The generated tree: system (enforce, 1000000/s, burst 1000000) → partners
// system/p<i> (enforce, 100000/s) → tenants system/p<i>/t<j> (1000/s, scope
// user). Every level is far above what one machine can send, so a budget
// run measures the cost of resolving and charging three levels, not the
// denials of a tight limit; per-user buckets make tenants deny only hot
// users under a Zipf key distribution.
const (
	treeRoot        = "system"
	systemRate      = 1_000_000
	partnerRate     = 100_000
	tenantRate      = 1000
	tenantScope     = "user"
	budgetUserLabel = "u"
)

// budgetConfig is a budget node's rate-limit object, the fields of the
// configuration table of the product contract (RL.BUDGET SET, IMPORT and
// EXPORT). Unset fields are left out so the server applies its defaults.
type budgetConfig struct {
	Sharing   string      `json:"sharing,omitempty"`   // private, inherit, enforce
	Algorithm string      `json:"algorithm,omitempty"` // as ALGO
	Sustained *sustained  `json:"sustained,omitempty"`
	Burst     *burstCap   `json:"burst,omitempty"`
	Budget    *budgetRule `json:"budget,omitempty"`
	Scope     string      `json:"scope,omitempty"`    // global, tenant, user, ip, route
	Strategy  string      `json:"strategy,omitempty"` // reject, queue, degrade
	MaxWaitMs *int64      `json:"max_wait_ms,omitempty"`
	Cost      *int64      `json:"cost,omitempty"`
	Quota     *quota      `json:"quota,omitempty"`
}

type sustained struct {
	Rate   int64  `json:"rate"`
	Window string `json:"window,omitempty"`
}

type burstCap struct {
	Capacity int64 `json:"capacity"`
}

type budgetRule struct {
	Mode            string  `json:"mode,omitempty"` // unlimited, allocated, shared
	Total           int64   `json:"total,omitempty"`
	OvercommitRatio float64 `json:"overcommit_ratio,omitempty"`
}

type quota struct {
	Limit    int64  `json:"limit"`
	Period   string `json:"period"`
	Timezone string `json:"timezone,omitempty"`
}

// budgetTree is the document RL.BUDGET IMPORT takes: path → configuration.
type budgetTree struct {
	Budgets map[string]budgetConfig `json:"budgets"`
}

// partnerPath returns system/p<i>.
func partnerPath(i int) string { return treeRoot + "/p" + strconv.Itoa(i) }

// tenantPath returns system/p<i>/t<j>.
func tenantPath(i, j int) string { return partnerPath(i) + "/t" + strconv.Itoa(j) }

// treeJSON returns the generated tree with partners partners of tenants
// tenants each, as RL.BUDGET IMPORT's JSON (keys in sorted order, so the
// same arguments always give the same bytes).
func treeJSON(partners, tenants int) ([]byte, error) {
	t := budgetTree{Budgets: make(map[string]budgetConfig, 1+partners*(1+tenants))}
	t.Budgets[treeRoot] = budgetConfig{
		Sharing:   "enforce",
		Sustained: &sustained{Rate: systemRate, Window: "second"},
		Burst:     &burstCap{Capacity: systemRate},
	}
	for i := 0; i < partners; i++ {
		t.Budgets[partnerPath(i)] = budgetConfig{
			Sharing:   "enforce",
			Sustained: &sustained{Rate: partnerRate, Window: "second"},
		}
		for j := 0; j < tenants; j++ {
			t.Budgets[tenantPath(i, j)] = budgetConfig{
				Sustained: &sustained{Rate: tenantRate, Window: "second"},
				Scope:     tenantScope,
			}
		}
	}
	return json.Marshal(t)
}

// budgetTarget maps a drawn key number to the tenant it addresses and the
// user it acts for: tenant k mod (partners × tenants), user u<k>. A skewed
// key distribution therefore skews both tenants and users.
func budgetTarget(k uint64, partners, tenants int) (partner, tenant int) {
	t := int(k % uint64(partners*tenants))
	return t / tenants, t % tenants
}
