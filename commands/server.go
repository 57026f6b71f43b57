package commands

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sluice-rl/sluice/internal/glob"
)

func serverCommands() []*Command {
	return []*Command{
		{Name: "COMMAND", Arity: -1, Flags: FlagReadOnly, Handler: commandCmd, Summary: "Describe sluice's commands.", Syntax: "[COUNT | DOCS [name [name ...]] | INFO [name [name ...]] | LIST | HELP]"},
		{Name: "INFO", Arity: -1, Flags: FlagReadOnly, Handler: infoCmd, Summary: "Server information and statistics.", Syntax: "[section [section ...]]"},
		{Name: "DBSIZE", Arity: 1, Flags: FlagReadOnly | FlagFast, Handler: dbsizeCmd, Summary: "Number of live buckets.", Syntax: ""},
		{Name: "TIME", Arity: 1, Flags: FlagReadOnly | FlagFast, Handler: timeCmd, Summary: "The server's clock.", Syntax: ""},
		{Name: "CONFIG", Arity: -2, Flags: FlagAdmin, Handler: configCmd, Summary: "Read the server's settings.", Syntax: "GET pattern [pattern ...]"},
		{Name: "MEMORY", Arity: -2, Flags: FlagAdmin, Handler: memoryCmd, Summary: "Collect garbage and return freed memory to the OS.", Syntax: "PURGE"},
	}
}

func flagNames(c *Command) []string {
	var f []string
	if c.Flags&FlagWrite != 0 {
		f = append(f, "write")
	}
	if c.Flags&FlagReadOnly != 0 {
		f = append(f, "readonly")
	}
	if c.Flags&FlagAdmin != 0 {
		f = append(f, "admin")
	}
	if c.Flags&FlagNoAuth != 0 {
		f = append(f, "no_auth")
	}
	if c.Flags&FlagFast != 0 {
		f = append(f, "fast")
	}
	return f
}

// writeCommandInfo writes one COMMAND INFO entry in Redis 7's ten-field
// form: name, arity, flags, first key, last key, step, ACL categories, tips,
// key specs, subcommands. Flags and categories are sets in RESP3.
func writeCommandInfo(ctx *Ctx, c *Command) {
	w := ctx.Conn
	w.WriteArray(10)
	w.WriteBulkString(lower(c.Name))
	w.WriteInt(c.Arity)
	flags := flagNames(c)
	ctx.WriteSet(len(flags))
	for _, f := range flags {
		w.WriteString(f)
	}
	w.WriteInt(c.FirstKey)
	w.WriteInt(c.FirstKey)
	if c.FirstKey > 0 {
		w.WriteInt(1)
	} else {
		w.WriteInt(0)
	}
	ctx.WriteSet(0)
	w.WriteArray(0)
	w.WriteArray(0)
	w.WriteArray(0)
}

// commandGroup is the group COMMAND DOCS reports.
func commandGroup(c *Command) string {
	switch {
	case strings.HasPrefix(c.Name, "RL.") || strings.HasPrefix(c.Name, "CL."):
		return "module"
	case c.Flags&FlagTx != 0 || c.Name == "UNWATCH":
		return "transactions"
	case c.Name == "SCAN" || c.Name == "TYPE" || c.Name == "TTL" || c.Name == "PTTL":
		return "generic"
	case c.Flags&FlagAdmin != 0 || c.Name == "INFO" || c.Name == "COMMAND" || c.Name == "DBSIZE" || c.Name == "TIME" || c.Name == "ACL":
		return "server"
	}
	return "connection"
}

// writeCommandDocs writes one COMMAND DOCS entry: the name, then a map of
// summary, since, group, complexity and (when it takes any) arguments,
// from which redis-cli builds its hints.
func writeCommandDocs(ctx *Ctx, c *Command) {
	w := ctx.Conn
	w.WriteBulkString(lower(c.Name))
	args := c.Args()
	n := 4
	if len(args) > 0 {
		n++
	}
	ctx.WriteMap(n)
	w.WriteBulkString("summary")
	w.WriteBulkString(c.Summary)
	w.WriteBulkString("since")
	w.WriteBulkString("0.1.0")
	w.WriteBulkString("group")
	w.WriteBulkString(commandGroup(c))
	w.WriteBulkString("complexity")
	w.WriteBulkString("O(1)")
	if len(args) > 0 {
		w.WriteBulkString("arguments")
		writeArgs(ctx, args)
	}
}

func commandCmd(ctx *Ctx) {
	a := ctx.Args
	reg := ctx.Env.Registry
	if len(a) == 1 {
		ctx.Conn.WriteArray(len(reg.list))
		for _, c := range reg.list {
			writeCommandInfo(ctx, c)
		}
		return
	}
	// selected returns the named commands, or all of them when none is named.
	selected := func() []*Command {
		if len(a) == 2 {
			return reg.list
		}
		out := make([]*Command, 0, len(a)-2)
		for _, n := range a[2:] {
			out = append(out, reg.Lookup(n))
		}
		return out
	}
	switch sub := a[1]; {
	case eq(sub, "COUNT") && len(a) == 2:
		ctx.Conn.WriteInt(len(reg.list))
	case eq(sub, "INFO"):
		cs := selected()
		ctx.Conn.WriteArray(len(cs))
		for _, c := range cs {
			if c == nil {
				ctx.WriteNullArray()
			} else {
				writeCommandInfo(ctx, c)
			}
		}
	case eq(sub, "DOCS"):
		var cs []*Command
		for _, c := range selected() {
			if c != nil {
				cs = append(cs, c)
			}
		}
		ctx.WriteMap(len(cs))
		for _, c := range cs {
			writeCommandDocs(ctx, c)
		}
	case eq(sub, "HELP") && len(a) == 2:
		lines := []string{"COMMAND <subcommand> [<arg> ...]. Subcommands are:",
			"(no subcommand)", "    Return details about all sluice commands.",
			"COUNT", "    Return the total number of commands.",
			"DOCS [<command-name> ...]", "    Return documentary details about commands (all if none is named).",
			"INFO [<command-name> ...]", "    Return details about commands (all if none is named).",
			"LIST", "    Return the names of all commands.",
			"HELP", "    Print this help."}
		ctx.Conn.WriteArray(len(lines))
		for _, l := range lines {
			ctx.Conn.WriteString(l)
		}
	case eq(sub, "LIST") && len(a) == 2:
		ctx.Conn.WriteArray(len(reg.list))
		for _, c := range reg.list {
			ctx.Conn.WriteBulkString(lower(c.Name))
		}
	default:
		ctx.Conn.WriteError("ERR unknown subcommand or wrong number of arguments for '" + printable(sub, 64) + "'. Try COMMAND HELP.")
	}
}

func dbsizeCmd(ctx *Ctx) { ctx.Conn.WriteInt(ctx.keyCount()) }

// timeCmd answers the service clock, the time limits are decided at.
func timeCmd(ctx *Ctx) {
	now := time.Unix(0, ctx.Env.Clock())
	ctx.Conn.WriteArray(2)
	ctx.Conn.WriteBulkString(itoa(now.Unix()))
	ctx.Conn.WriteBulkString(itoa(int64(now.Nanosecond() / 1000)))
}

func configCmd(ctx *Ctx) {
	a := ctx.Args
	if !eq(a[1], "GET") {
		if eq(a[1], "SET") {
			ctx.Conn.WriteError("ERR CONFIG SET is not supported: settings are fixed at start (flags, SLUICE_* variables, --config file)")
			return
		}
		ctx.Conn.WriteError("ERR unknown subcommand '" + printable(a[1], 64) + "'. Try CONFIG GET.")
		return
	}
	if len(a) < 3 {
		ctx.Conn.WriteError(WrongArity("config|get"))
		return
	}
	var out []Setting
	for _, s := range ctx.Env.Settings() {
		for _, p := range a[2:] {
			if glob.Match(bytes.ToLower(p), []byte(s.Name)) {
				out = append(out, s)
				break
			}
		}
	}
	ctx.WriteMap(len(out))
	for _, s := range out {
		ctx.Conn.WriteBulkString(s.Name)
		ctx.Conn.WriteBulkString(s.Value)
	}
}

// InfoSections are INFO's sections in order. "buckets" is sluice's own;
// "keyspace" says the same in Redis's form (db0:keys=…), which tools such
// as redis-cli --stat read.
var InfoSections = []string{"server", "clients", "stats", "memory", "buckets", "keyspace", "raft"}

func infoCmd(ctx *Ctx) {
	want := map[string]bool{}
	for _, a := range ctx.Args[1:] {
		want[strings.ToLower(string(a))] = true
	}
	all := len(want) == 0 || want["all"] || want["everything"] || want["default"]
	var b strings.Builder
	for _, sec := range InfoSections {
		if !all && !want[sec] {
			continue
		}
		fields := ctx.Env.infoSection(sec)
		if fields == nil {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(sec[:1]) + sec[1:] + "\r\n")
		for _, f := range fields {
			b.WriteString(f.Name + ":" + f.Value + "\r\n")
		}
	}
	ctx.WriteVerbatim(b.String())
}

// infoSection returns one INFO section's fields.
func (env *Env) infoSection(sec string) []InfoField {
	f := func(name string, v any) InfoField { return InfoField{Name: name, Value: fmt.Sprint(v)} }
	switch sec {
	case "server":
		up := time.Since(env.Started)
		return []InfoField{
			f("sluice_version", env.Version),
			f("redis_version", "7.2.0"), // what clients that parse INFO should assume of the protocol
			f("redis_mode", "standalone"),
			f("os", runtime.GOOS+" "+runtime.GOARCH),
			f("arch_bits", 64),
			f("go_version", runtime.Version()),
			f("process_id", os.Getpid()),
			f("uptime_in_seconds", int64(up/time.Second)),
			f("uptime_in_days", int64(up/(24*time.Hour))),
		}
	case "clients":
		tracking := 0
		for _, s := range env.Clients.Snapshot() {
			if s.tracking.Load() {
				tracking++
			}
		}
		return []InfoField{
			f("connected_clients", env.Clients.Len()),
			f("blocked_clients", env.Metrics.Waiting()), // held by WAIT
			f("tracking_clients", tracking),
		}
	case "stats":
		allowed, denied := env.Metrics.AcquireTotals()
		full, refused := env.Service.Store.Evictions(), env.Service.Store.Refusals()
		fields := []InfoField{
			f("total_connections_received", int64(value(env.Metrics.ConnectionsReceived))),
			f("total_commands_processed", env.Metrics.TotalCommands()),
			f("acquire_allowed", allowed),
			f("acquire_denied", denied),
			f("evicted_full_buckets", full),
			f("refused_new_buckets", refused),
		}
		if sc := env.Service.Scripts; sc != nil {
			// sluice's own: script calls run as built-in operations
			// (recognised library scripts, docs/redis-libraries.md).
			fields = append(fields, f("scripts_run_natively", sc.NativeRuns()))
		}
		return fields
	case "memory":
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		fields := []InfoField{
			f("used_memory", m.HeapAlloc),
			f("used_memory_human", fmt.Sprintf("%.2fM", float64(m.HeapAlloc)/(1<<20))),
			f("used_memory_rss", m.Sys),
			f("total_system_memory", systemMemory()),
			f("gc_cycles", m.NumGC),
		}
		if sc := env.Service.Scripts; sc != nil {
			fields = append(fields, f("number_of_cached_scripts", sc.Len()), f("used_memory_scripts_eval", sc.Bytes()))
		}
		return fields
	case "buckets":
		return []InfoField{
			f("buckets", env.Service.Store.Len()),
			f("max_buckets", env.Service.Store.MaxBuckets()),
		}
	case "keyspace":
		// Every bucket is forgotten once full: each has a time to live
		// (see TTL), hence expires = keys.
		n := env.Service.Store.Len()
		if n == 0 {
			return []InfoField{}
		}
		return []InfoField{f("db0", fmt.Sprintf("keys=%d,expires=%d,avg_ttl=0", n, n))}
	}
	if env.Info != nil {
		return env.Info(sec)
	}
	return nil
}

// systemMemory returns the machine's memory in bytes from /proc/meminfo,
// or 0 where that is not available.
func systemMemory() uint64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			var kb uint64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), &kb)
			return kb * 1024
		}
	}
	return 0
}

// memoryCmd is MEMORY PURGE: a full garbage collection that also returns
// freed memory to the OS, after which INFO memory's used_memory is the live
// heap (what a bucket costs can be read off it).
func memoryCmd(ctx *Ctx) {
	if !eq(ctx.Args[1], "PURGE") || len(ctx.Args) != 2 {
		ctx.Conn.WriteError("ERR unknown subcommand or wrong number of arguments for '" + printable(ctx.Args[1], 64) + "'. Try MEMORY PURGE.")
		return
	}
	debug.FreeOSMemory()
	ctx.Conn.WriteString(okReply)
}
