package commands

// Writer is what a handler writes its reply to: the methods of redcon's
// Writer, which the server's connections and Capture embed, so that a
// reply goes straight into its connection's write buffer. A handler sees
// nothing else of the connection.
type Writer interface {
	WriteError(msg string)
	WriteString(str string)
	WriteBulk(bulk []byte)
	WriteBulkString(bulk string)
	WriteInt(num int)
	WriteInt64(num int64)
	WriteUint64(num uint64)
	WriteArray(count int)
	WriteNull()
	WriteRaw(data []byte)
	WriteAny(v any)
}

// Closer is a Writer whose connection can be ended once the replies
// written so far are out (QUIT).
type Closer interface {
	Writer
	Close() error
}
