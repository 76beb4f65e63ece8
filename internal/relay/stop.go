package relay

import (
	"io"
	"log/slog"
	"os"
	"time"
)

// A read of the host's stdin and a write to its stdout block for as long
// as the host keeps stdin open and does not read its stdout. Serve ends
// them when it returns where the streams allow it (stopReading,
// stopWriting), so that the goroutines doing them end with it rather
// than with the process.

// stopWait bounds Serve's wait for one of its goroutines to end once what
// it waits on was interrupted or closed: the read of the host's stdin,
// the write to its stdout, the session of an owner the relay took over.
// They end at once; the bound is for a stream or an owner that ignores
// the interruption, which must not keep Serve from returning.
const stopWait = 5 * time.Second

// stopReading ends a Read of in that blocks in another goroutine, and
// every later one, and reports whether it could: it sets a read deadline
// in the past, or else closes in (see closeStream).
func stopReading(in io.Reader) bool {
	if d, ok := in.(interface{ SetReadDeadline(time.Time) error }); ok && d.SetReadDeadline(time.Now()) == nil {
		return true
	}
	return closeStream(in)
}

// stopWriting is stopReading for a Write to out.
func stopWriting(out io.Writer) bool {
	if d, ok := out.(interface{ SetWriteDeadline(time.Time) error }); ok && d.SetWriteDeadline(time.Now()) == nil {
		return true
	}
	return closeStream(out)
}

// closeStream closes s if it is an io.Closer (an io.Pipe's end, say) and
// reports whether it did. An *os.File is left open: one that takes no
// deadline is in blocking mode, where closing it does not end a read or
// write in progress, and would free its descriptor (stdin's or stdout's)
// for the next file the process opens.
func closeStream(s any) bool {
	c, ok := s.(io.Closer)
	if _, file := s.(*os.File); !ok || file {
		return false
	}
	_ = c.Close() // an error means it was closed already: a read or write of it ends all the same
	return true
}

// waitEnded waits (up to stopWait) for done, which what names closes when
// it ends, and logs a warning if it does not.
func waitEnded(log *slog.Logger, done <-chan struct{}, what string) {
	t := time.NewTimer(stopWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn(what+" did not end when interrupted; it is left to end with the process", "wait", stopWait)
	}
}
