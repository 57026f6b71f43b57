// Package resp encodes RESP commands, for the nodes' client (package
// peer) and the load tools.
package resp

import "strconv"

// AppendCommand appends args as one RESP multibulk command.
func AppendCommand[S ~string | ~[]byte](b []byte, args ...S) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}
