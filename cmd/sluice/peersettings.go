package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Every setting of envoyproxy/ratelimit's src/settings/settings.go (and
// gostats' STATSD_PROTOCOL, which its stats store reads), and what
// `sluice ratelimit` does with it: none is passed over in silence
// (docs/envoy.md's table says the same; peersettings_test.go holds both to
// the peer's list, kept in testdata/peer-settings.txt).
//
//   - honoured: read into sluice's settings (flags and ratelimitMode).
//   - refused: a value sluice cannot honour stops the start, naming it.
//   - ignored: changes nothing here; set, it is named in an INFO line
//     with the reason.
//
// A setting that only matters beside another (PROMETHEUS_ADDR beside
// USE_PROMETHEUS=true) is read only then; set without it, it is named in
// an INFO line too, with its unread reason, as is every setting set but
// not read (reportUnread).

type settingClass uint8

const (
	honoured settingClass = iota
	refused
	ignored
)

func (c settingClass) String() string {
	return [...]string{"honoured", "refused", "ignored"}[c]
}

// peerSetting is one row.
type peerSetting struct {
	name  string
	class settingClass
	// unread is said in the INFO line when the setting is set but was not
	// read: why it changes nothing.
	unread string
	// sample is a value the tests set it to: for honoured, one other than
	// the default, beside context (the settings it needs); for refused,
	// one that is refused. $CERT, $KEY and $CA stand for PEM files.
	sample  string
	context []string
}

// The reasons of the INFO lines.
const (
	ownStore      = "sluice is its own store, no Redis or memcache: replicas share limits by forming a cluster (SLUICE_JOIN)"
	statsFormat   = "statsd is sent in gostats' format (not DogStatsD) and the Prometheus series are named by envoyproxy/ratelimit's default mapping"
	noTracing     = "tracing is off without TRACING_ENABLED=true (which sluice refuses: it exports no traces)"
	xdsOnly       = "they apply with CONFIG_TYPE=GRPC_XDS_SOTW only, as for envoyproxy/ratelimit"
	xdsTLSOnly    = "they apply with CONFIG_GRPC_XDS_SERVER_USE_TLS=true only, as for envoyproxy/ratelimit"
	filesOnly     = "with CONFIG_TYPE=GRPC_XDS_SOTW the rules come from the xDS server, and no rule directory is read"
	statsdOnly    = "no statsd: USE_STATSD=false or DISABLE_STATS=true"
	promOnly      = "they apply with USE_PROMETHEUS=true only (and without DISABLE_STATS=true), as for envoyproxy/ratelimit"
	statsOff      = "DISABLE_STATS=true turns every stat of envoyproxy/ratelimit off"
	headersOnly   = "they apply with LIMIT_RESPONSE_HEADERS_ENABLED=true only, as for envoyproxy/ratelimit"
	udsInstead    = "GRPC_UDS is set: the gRPC listener is that Unix socket instead, as for envoyproxy/ratelimit"
	watchedAnyway = "the rule files are checked every 500 ms either way: an edit, a rename or a ConfigMap's ..data swap is in force within a second"
	forceFile     = "with CONFIG_TYPE=FILE the files are read at start either way, and rules that do not load leave the node up"
)

var xdsContext = []string{"CONFIG_TYPE=GRPC_XDS_SOTW"}

func xds(more ...string) []string { return append(append([]string{}, xdsContext...), more...) }

var peerSettings = []peerSetting{
	{name: "HOST", sample: "127.0.0.2"},
	{name: "PORT", sample: "9999"},
	{name: "DEBUG_HOST", sample: "127.0.0.2"},
	{name: "DEBUG_PORT", sample: "6071"},
	{name: "GRPC_UDS", sample: "/tmp/ratelimit.sock"},
	{name: "GRPC_HOST", sample: "127.0.0.2", unread: udsInstead},
	{name: "GRPC_PORT", sample: "9998", unread: udsInstead},
	{name: "GRPC_MAX_CONNECTION_AGE", sample: "1m"},
	{name: "GRPC_MAX_CONNECTION_AGE_GRACE", sample: "1m"},
	{name: "GRPC_SERVER_USE_TLS", sample: "true", context: []string{"GRPC_SERVER_TLS_CERT=$CERT", "GRPC_SERVER_TLS_KEY=$KEY"}},
	{name: "GRPC_SERVER_TLS_CERT", sample: "$CERT", context: []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_KEY=$KEY"}},
	{name: "GRPC_SERVER_TLS_KEY", sample: "$KEY", context: []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=$CERT"}},
	{name: "GRPC_CLIENT_TLS_CACERT", sample: "$CA", context: []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=$CERT", "GRPC_SERVER_TLS_KEY=$KEY"}},
	{name: "GRPC_CLIENT_TLS_SAN", sample: "envoy.internal", context: []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=$CERT", "GRPC_SERVER_TLS_KEY=$KEY", "GRPC_CLIENT_TLS_CACERT=$CA"}},
	{name: "LOG_LEVEL", sample: "debug"},
	{name: "LOG_FORMAT", sample: "json"},
	{name: "CONFIG_TYPE", sample: "GRPC_XDS_SOTW"},
	{name: "FORCE_START_WITHOUT_INITIAL_CONFIG", sample: "true", context: xdsContext, unread: forceFile},
	{name: "CONFIG_GRPC_XDS_NODE_ID", sample: "node-7", context: xdsContext, unread: xdsOnly},
	{name: "CONFIG_GRPC_XDS_NODE_METADATA", sample: "zone=b", context: xdsContext, unread: xdsOnly},
	{name: "CONFIG_GRPC_XDS_SERVER_URL", sample: "xds.internal:18001", context: xdsContext, unread: xdsOnly},
	{name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", sample: "5s", context: xdsContext, unread: xdsOnly},
	{name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", sample: "authorization:Bearer t", context: xdsContext, unread: xdsOnly},
	{name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", sample: "true", context: xdsContext, unread: xdsOnly},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", sample: "$CERT", context: xds("CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=$KEY"), unread: xdsTLSOnly},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", sample: "$KEY", context: xds("CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=$CERT"), unread: xdsTLSOnly},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", sample: "$CA", context: xds("CONFIG_GRPC_XDS_SERVER_USE_TLS=true"), unread: xdsTLSOnly},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", sample: "xds.internal", context: xds("CONFIG_GRPC_XDS_SERVER_USE_TLS=true"), unread: xdsTLSOnly},
	{name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", sample: "1s", context: xdsContext, unread: xdsOnly},
	{name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", sample: "2m", context: xdsContext, unread: xdsOnly},
	{name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", sample: "2", context: xdsContext, unread: xdsOnly},
	{name: "XDS_CLIENT_BACKOFF_JITTER", sample: "false", context: xdsContext, unread: xdsOnly},
	{name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", sample: "1048576", context: xdsContext, unread: xdsOnly},
	{name: "USE_DOG_STATSD", class: ignored, unread: statsFormat, sample: "true"},
	{name: "USE_DOG_STATSD_MOGRIFIERS", class: ignored, unread: statsFormat, sample: "HTTP"},
	{name: "USE_STATSD", sample: "false", unread: statsOff},
	{name: "STATSD_HOST", sample: "statsd.internal", unread: statsdOnly},
	{name: "STATSD_PORT", sample: "9125", unread: statsdOnly},
	{name: "STATSD_PROTOCOL", sample: "udp", unread: statsdOnly},
	{name: "EXTRA_TAGS", sample: "zone:b", unread: statsdOnly},
	{name: "STATS_FLUSH_INTERVAL", sample: "1s", unread: statsdOnly},
	{name: "DISABLE_STATS", sample: "true"},
	{name: "USE_PROMETHEUS", sample: "true", unread: statsOff},
	{name: "PROMETHEUS_ADDR", sample: ":9091", context: []string{"USE_PROMETHEUS=true"}, unread: promOnly},
	{name: "PROMETHEUS_PATH", sample: "/stats", context: []string{"USE_PROMETHEUS=true"}, unread: promOnly},
	{name: "PROMETHEUS_MAPPER_YAML", class: ignored, unread: statsFormat, sample: "/etc/mapper.yaml"},
	{name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", sample: "true", unread: statsOff},
	{name: "RUNTIME_ROOT", sample: "/r", unread: filesOnly},
	{name: "RUNTIME_SUBDIRECTORY", sample: "sub", unread: filesOnly},
	{name: "RUNTIME_APPDIRECTORY", sample: "app", unread: filesOnly},
	{name: "RUNTIME_IGNOREDOTFILES", sample: "true", unread: filesOnly},
	{name: "RUNTIME_WATCH_ROOT", class: ignored, unread: watchedAnyway, sample: "false"},
	{name: "EXPIRATION_JITTER_MAX_SECONDS", class: ignored, unread: ownStore, sample: "60"},
	{name: "LOCAL_CACHE_SIZE_IN_BYTES", class: ignored, unread: ownStore, sample: "1000000"},
	{name: "NEAR_LIMIT_RATIO", sample: "0.5", unread: statsOff},
	{name: "CACHE_KEY_PREFIX", class: ignored, unread: ownStore, sample: "rl_"},
	{name: "BACKEND_TYPE", class: ignored, unread: ownStore, sample: "memcache"},
	{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", sample: "true"},
	{name: "LIMIT_RESPONSE_HEADERS_ENABLED", sample: "true"},
	{name: "LIMIT_LIMIT_HEADER", sample: "X-Limit", context: []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, unread: headersOnly},
	{name: "LIMIT_REMAINING_HEADER", sample: "X-Remaining", context: []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, unread: headersOnly},
	{name: "LIMIT_RESET_HEADER", sample: "X-Reset", context: []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true"}, unread: headersOnly},
	{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", sample: "true"},
	{name: "SHADOW_MODE", sample: "true"},
	{name: "QUOTA_MODE", sample: "true"},
	{name: "RESPONSE_DYNAMIC_METADATA", sample: "true"},
	{name: "MERGE_DOMAIN_CONFIG", sample: "true"},
	{name: "TRACING_ENABLED", class: refused, sample: "true"},
	{name: "TRACING_SERVICE_NAME", class: ignored, unread: noTracing, sample: "ratelimit"},
	{name: "TRACING_SERVICE_NAMESPACE", class: ignored, unread: noTracing, sample: "edge"},
	{name: "TRACING_SERVICE_INSTANCE_ID", class: ignored, unread: noTracing, sample: "rl-1"},
	{name: "TRACING_EXPORTER_PROTOCOL", class: ignored, unread: noTracing, sample: "grpc"},
	{name: "TRACING_SAMPLING_RATE", class: ignored, unread: noTracing, sample: "0.1"},
}

// backendSettings are the peer's Redis and memcache settings: ignored,
// sluice is its own store.
var backendSettings = []string{
	"REDIS_SOCKET_TYPE", "REDIS_TYPE", "REDIS_URL", "REDIS_POOL_SIZE", "REDIS_AUTH", "REDIS_TLS",
	"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_CACERT", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
	"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_CLUSTER_PIPELINE_PARALLELISM",
	"REDIS_PERSECOND", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL",
	"REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_TLS", "REDIS_SENTINEL_AUTH",
	"REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND_PIPELINE_LIMIT",
	"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_TIMEOUT",
	"REDIS_PERSECOND_TIMEOUT", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
	"REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME",
	"MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV", "MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS",
	"MEMCACHE_TLS_CLIENT_CERT", "MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
}

// addBackendRows adds the rows of backendSettings (after peerKinds, which
// their samples follow).
func addBackendRows() {
	for _, n := range backendSettings {
		sample := map[string]string{"bool": "true", "int": "5", "duration": "5s"}[peerKinds[n]]
		if sample == "" {
			sample = "redis.internal:6379"
		}
		peerSettings = append(peerSettings, peerSetting{name: n, class: ignored, unread: ownStore, sample: sample})
	}
}

// peerKinds are the types of the peer's settings that are not strings.
// The peer parses every setting at start, used or not (envconfig), and
// refuses to start on a value its type does not take: so does sluice,
// for the settings it does not read too.
var peerKinds = map[string]string{}

func init() {
	for kind, names := range map[string]string{
		"bool": "GRPC_SERVER_USE_TLS FORCE_START_WITHOUT_INITIAL_CONFIG CONFIG_GRPC_XDS_SERVER_USE_TLS XDS_CLIENT_BACKOFF_JITTER " +
			"USE_DOG_STATSD USE_STATSD DISABLE_STATS USE_PROMETHEUS PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS RUNTIME_IGNOREDOTFILES " +
			"RUNTIME_WATCH_ROOT STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT LIMIT_RESPONSE_HEADERS_ENABLED " +
			"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED REDIS_TLS REDIS_TLS_SKIP_HOSTNAME_VERIFICATION REDIS_PERSECOND " +
			"REDIS_PERSECOND_TLS REDIS_HEALTH_CHECK_ACTIVE_CONNECTION MEMCACHE_TLS MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION " +
			"SHADOW_MODE QUOTA_MODE RESPONSE_DYNAMIC_METADATA MERGE_DOMAIN_CONFIG TRACING_ENABLED",
		"int": "PORT DEBUG_PORT GRPC_PORT XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES STATSD_PORT EXPIRATION_JITTER_MAX_SECONDS " +
			"LOCAL_CACHE_SIZE_IN_BYTES REDIS_POOL_SIZE REDIS_PIPELINE_LIMIT REDIS_CLUSTER_PIPELINE_PARALLELISM " +
			"REDIS_PERSECOND_POOL_SIZE REDIS_PERSECOND_PIPELINE_LIMIT REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM MEMCACHE_MAX_IDLE_CONNS",
		"duration": "GRPC_MAX_CONNECTION_AGE GRPC_MAX_CONNECTION_AGE_GRACE CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL " +
			"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL XDS_CLIENT_BACKOFF_MAX_INTERVAL STATS_FLUSH_INTERVAL REDIS_PIPELINE_WINDOW " +
			"REDIS_PERSECOND_PIPELINE_WINDOW REDIS_TIMEOUT REDIS_PERSECOND_TIMEOUT REDIS_STARTUP_INITIAL_INTERVAL " +
			"REDIS_STARTUP_MAX_INTERVAL REDIS_STARTUP_MAX_ELAPSED_TIME MEMCACHE_SRV_REFRESH",
		"float": "XDS_CLIENT_BACKOFF_RANDOM_FACTOR NEAR_LIMIT_RATIO TRACING_SAMPLING_RATE",
		"map":   "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS EXTRA_TAGS",
	} {
		for _, n := range strings.Fields(names) {
			peerKinds[n] = kind
		}
	}
	addBackendRows()
}

// wellFormed reports whether v is a value of kind, as envconfig parses it.
func wellFormed(kind, v string) (string, bool) {
	var err error
	switch kind {
	case "bool":
		_, err = strconv.ParseBool(v)
		return "true or false", err == nil
	case "int":
		_, err = strconv.ParseInt(v, 0, 64)
		return "an integer", err == nil
	case "duration":
		_, err = time.ParseDuration(v)
		return "a duration such as 10s", err == nil
	case "float":
		_, err = strconv.ParseFloat(v, 64)
		return "a number", err == nil
	case "map":
		for _, kv := range strings.Split(v, ",") {
			if !strings.Contains(kv, ":") {
				return "name:value,name:value", false
			}
		}
	}
	return "", true
}

// reportUnread names, in one INFO line per reason, every setting of the
// table that is set but was not read, so that none changes nothing in
// silence; one whose value its type does not take stops the start, as it
// stops the peer's.
func reportUnread(e *peerEnv, m *ratelimitMode) {
	byReason := map[string][]string{}
	var reasons []string
	for _, s := range peerSettings {
		v := e.env(s.name)
		if v == "" || e.read[s.name] {
			continue
		}
		if want, ok := wellFormed(peerKinds[s.name], v); !ok {
			shown := fmt.Sprintf("=%q", v)
			if peerKinds[s.name] == "map" {
				shown = "" // headers and tags may carry credentials
			}
			e.errs = append(e.errs, fmt.Sprintf("%s%s: must be %s (envoyproxy/ratelimit refuses to start on it too, although this setting changes nothing here)", s.name, shown, want))
			continue
		}
		why := s.unread
		if why == "" {
			why = "not read in this configuration"
		}
		if byReason[why] == nil {
			reasons = append(reasons, why)
		}
		byReason[why] = append(byReason[why], s.name)
	}
	for _, why := range reasons {
		names := byReason[why]
		sort.Strings(names)
		m.info = append(m.info, "settings ignored ("+why+"): "+strings.Join(names, ", "))
	}
}
