package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/sluice-rl/sluice/budget"
	"github.com/sluice-rl/sluice/commands"
)

// ReadBudgets reads and checks a --budgets file. Its errors name the file,
// the place (line and column of a JSON syntax error, or the budget at
// fault) and the reason, so that a node refuses to start on a file it
// could not seed from.
func ReadBudgets(path string) (map[string]budget.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--budgets: %v", err)
	}
	if len(b) > commands.MaxImportBytes {
		return nil, fmt.Errorf("--budgets %s: the file is %d bytes; at most %d go in one Raft entry", path, len(b), commands.MaxImportBytes)
	}
	// The JSON's syntax first, where the decoder knows the offset.
	var probe any
	if err := json.Unmarshal(b, &probe); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			line, col := lineCol(b, se.Offset)
			return nil, fmt.Errorf("--budgets %s:%d:%d: %v", path, line, col, se)
		case errors.As(err, &te):
			line, col := lineCol(b, te.Offset)
			return nil, fmt.Errorf("--budgets %s:%d:%d: %v", path, line, col, te)
		}
		return nil, fmt.Errorf("--budgets %s: %v", path, err)
	}
	cfgs, err := budget.ParseExport(b)
	if err != nil {
		msg := err.Error()
		var fe *budget.Error
		if errors.As(err, &fe) {
			msg = fe.Msg
		}
		return nil, fmt.Errorf("--budgets %s: %s", path, msg)
	}
	return cfgs, nil
}

// lineCol turns a byte offset (the decoder's: just past the byte at
// fault) into a 1-based line and column.
func lineCol(b []byte, off int64) (line, col int) {
	if off > int64(len(b)) {
		off = int64(len(b))
	}
	if off > 0 {
		off-- // the offending byte, not the one after it
	}
	before := b[:off]
	line = bytes.Count(before, []byte("\n")) + 1
	col = int(off) - bytes.LastIndexByte(before, '\n')
	return line, col
}
