package commands

import (
	"strings"
	"sync"
)

// COMMAND DOCS describes each command's arguments the way Redis 7 does, so
// that redis-cli shows a hint for every sluice command as the user types.
// The description is derived from the command's Syntax string, which is
// therefore written in the notation redis-cli renders back: KEYWORD value,
// [optional], a|b alternatives, x [x ...] for repetition. A test renders
// the arguments as redis-cli does and checks that it gets Syntax back.

// Arg is one argument of a command as COMMAND DOCS describes it.
type Arg struct {
	Name     string
	Type     string // key, string, integer, pattern, pure-token, oneof, block
	Token    string
	Optional bool
	Multiple bool
	Args     []Arg // of a oneof or block
}

var (
	argsMu    sync.Mutex
	argsCache = map[*Command][]Arg{}
)

// Args returns the command's arguments, parsed once from its Syntax.
func (c *Command) Args() []Arg {
	argsMu.Lock()
	defer argsMu.Unlock()
	if a, ok := argsCache[c]; ok {
		return a
	}
	p := syntaxParser{toks: tokenize(c.Syntax)}
	a := p.alts(c.FirstKey > 0)
	argsCache[c] = a
	return a
}

// tokenize splits a syntax string into words, '[', ']' and the '|' that
// separates alternatives (spaced); a word such as key|path or ON|OFF is
// kept whole: tight alternatives.
func tokenize(s string) []string {
	var out []string
	for _, f := range strings.Fields(s) {
		for f != "" {
			switch i := strings.IndexAny(f, "[]"); {
			case i < 0:
				out = append(out, f)
				f = ""
			case i > 0:
				out = append(out, f[:i])
				f = f[i:]
			default:
				out = append(out, f[:1])
				f = f[1:]
			}
		}
	}
	return out
}

type syntaxParser struct {
	toks []string
	i    int
}

func (p *syntaxParser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

// alts parses seq ('|' seq)*: one sequence, or a oneof of sequences.
func (p *syntaxParser) alts(keyFirst bool) []Arg {
	seqs := [][]Arg{p.seq(keyFirst)}
	for p.peek() == "|" {
		p.i++
		seqs = append(seqs, p.seq(keyFirst))
	}
	if len(seqs) == 1 {
		return seqs[0]
	}
	one := Arg{Name: "alternatives", Type: "oneof"}
	for _, s := range seqs {
		one.Args = append(one.Args, group(s))
	}
	return []Arg{one}
}

// group makes one argument of a sequence: itself if alone, else a block.
func group(s []Arg) Arg {
	if len(s) == 1 {
		return s[0]
	}
	return Arg{Name: "block", Type: "block", Args: s}
}

func isKeyword(w string) bool {
	if w == "" {
		return false
	}
	for _, c := range w {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '-' || c == '_') {
			return false
		}
	}
	return 'A' <= w[0] && w[0] <= 'Z'
}

// isWord reports whether w is a value or tight alternatives, not syntax.
func isWord(w string) bool { return w != "" && w != "[" && w != "]" && w != "|" && w != "..." }

// word is one value, keyword or tight alternatives (a|b).
func word(w string, key bool) Arg {
	if strings.Contains(w, "|") {
		one := Arg{Name: strings.ReplaceAll(w, "|", "_or_"), Type: "oneof"}
		for i, part := range strings.Split(w, "|") {
			one.Args = append(one.Args, word(part, key && i == 0))
		}
		return one
	}
	if isKeyword(w) {
		return Arg{Name: strings.ToLower(w), Type: "pure-token", Token: w}
	}
	if key {
		return Arg{Name: w, Type: "key"}
	}
	return Arg{Name: w, Type: valueType(w)}
}

// seq parses items up to ']', '|' or the end.
func (p *syntaxParser) seq(keyFirst bool) []Arg {
	var out []Arg
	for {
		switch w := p.peek(); {
		case w == "" || w == "]" || w == "|":
			return out
		case w == "[":
			p.i++
			inner := p.alts(false)
			if p.peek() == "]" {
				p.i++
			}
			// x [x ...]: the previous argument repeats.
			if len(inner) == 2 && inner[1].Name == "..." && len(out) > 0 && out[len(out)-1].Name == inner[0].Name {
				out[len(out)-1].Multiple = true
				continue
			}
			g := group(inner)
			g.Optional = true
			out = append(out, g)
		case w == "...":
			p.i++
			out = append(out, Arg{Name: "...", Type: "string"})
		case isKeyword(w) && isWord(p.peekAt(1)) && !isKeyword(p.peekAt(1)):
			// KEYWORD value: a token with its value.
			p.i += 2
			a := word(p.toks[p.i-1], false)
			a.Token = w
			out = append(out, a)
		default:
			p.i++
			out = append(out, word(w, keyFirst && len(out) == 0))
		}
	}
}

func (p *syntaxParser) peekAt(k int) string {
	if p.i+k < len(p.toks) {
		return p.toks[p.i+k]
	}
	return ""
}

// valueType guesses the argument's type from its name; redis-cli shows
// only the name, the type tells clients what to send.
func valueType(name string) string {
	switch name {
	case "n", "ms", "index", "cursor", "count", "protover", "max_burst", "count_per_period", "quantity":
		return "integer"
	case "pattern":
		return "pattern"
	}
	return "string"
}

// RenderArgs renders arguments the way redis-cli 7 builds a command's
// hint from COMMAND DOCS (cliAddArgument).
func RenderArgs(args []Arg, sep string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(renderArg(a))
	}
	return b.String()
}

func renderArg(a Arg) string {
	var repeat string
	switch a.Type {
	case "oneof":
		repeat = RenderArgs(a.Args, "|")
	case "block":
		repeat = RenderArgs(a.Args, " ")
	case "pure-token":
	default:
		repeat = a.Name
	}
	token := a.Token
	if token != "" && a.Type != "pure-token" {
		token += " "
	}
	s := token + repeat
	if a.Multiple {
		s += " [" + repeat + " ...]"
	}
	if a.Optional {
		s = "[" + s + "]"
	}
	return s
}

// writeArgs writes arguments as COMMAND DOCS does: an array of maps with
// name, type, token, flags and nested arguments.
func writeArgs(ctx *Ctx, args []Arg) {
	w := ctx.Conn
	w.WriteArray(len(args))
	for _, a := range args {
		var flags []string
		if a.Optional {
			flags = append(flags, "optional")
		}
		if a.Multiple {
			flags = append(flags, "multiple")
		}
		n := 2
		if a.Token != "" {
			n++
		}
		if len(flags) > 0 {
			n++
		}
		if len(a.Args) > 0 {
			n++
		}
		ctx.WriteMap(n)
		w.WriteBulkString("name")
		w.WriteBulkString(a.Name)
		w.WriteBulkString("type")
		w.WriteBulkString(a.Type)
		if a.Token != "" {
			w.WriteBulkString("token")
			w.WriteBulkString(a.Token)
		}
		if len(flags) > 0 {
			w.WriteBulkString("flags")
			ctx.WriteSet(len(flags))
			for _, f := range flags {
				w.WriteString(f)
			}
		}
		if len(a.Args) > 0 {
			w.WriteBulkString("arguments")
			writeArgs(ctx, a.Args)
		}
	}
}
