package server

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/mas-mcp/mas-mcp/engine"
)

// trailCursors hide the trail's own numbering from the clients of
// mas://tasks/{id}/trail, get_trail and /api/trail.
//
// Every trail store numbers its entries with one counter across every
// task (the NATS stream's sequence, MemoryTrail's index): shown as an
// entry's seq or as a cursor, the gap between two of an operator's own
// entries told how many entries other tasks — other operators' — wrote
// meanwhile. So the server gives out no seq (engine.TrailEntry.Seq is
// cleared on every entry it shows), and a cursor is the store's cursor
// sealed: one AES block of the store's position (8 bytes) and a tag of the
// reader and the task (8 bytes of SHA-256), under a key of this process.
// The client can neither read it, nor make one, nor use it for another
// operator or task (the tag does not match: refused with the store's own
// error). One block is a permutation: the same position gives the same
// cursor, and the cursor is 22 bytes, which MinNameBytes allows for.
//
// Why not number each task's entries on their own (per-task seq)? The
// base task is everyone's: every operator's actions and steps are
// recorded in it, and an operator may read it, less the others' entries
// (visibleEntries): numbered per task, the gaps would still count them.
// Numbering per reader would have to count, for every page, the entries
// the reader may see since the task began. Admins are shown no seq either:
// they too may not see others' private messages.
//
// The key is the process's: a cursor does not survive a restart of the
// server (the store's own cursors did, being its positions). A client
// given the refusal reads the trail again from the start; the entries are
// still there.
type trailCursors struct{ block cipher.Block }

func newTrailCursors() (*trailCursors, error) {
	block, err := newProcessCipher()
	if err != nil {
		return nil, err
	}
	return &trailCursors{block: block}, nil
}

// newProcessCipher is AES-256 with a random key of this process (sealed
// cursors: listCursors, trailCursors).
func newProcessCipher() (cipher.Block, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	return aes.NewCipher(key)
}

// trailCursorTag binds a cursor to its reader and task.
func trailCursorTag(reader, task string) []byte {
	sum := sha256.Sum256([]byte(strconv.Quote(reader) + " " + strconv.Quote(task)))
	return sum[:8]
}

// seal turns a position in the store's trail (what engine.TrailCursor
// gives the store) into the reader's cursor.
func (c *trailCursors) seal(pos uint64, reader, task string) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], pos)
	copy(b[8:], trailCursorTag(reader, task))
	c.block.Encrypt(b[:], b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// open turns a cursor seal gave reader for task back into the store's; any
// other is refused with the store's error for a bad cursor.
func (c *trailCursors) open(cursor, reader, task string) (string, error) {
	// Strict: the unused low bits of the last character must be zero, so
	// a position has one cursor only.
	b, err := base64.RawURLEncoding.Strict().DecodeString(cursor)
	if err == nil && len(b) == 16 {
		c.block.Decrypt(b, b)
		if subtle.ConstantTimeCompare(b[8:], trailCursorTag(reader, task)) == 1 {
			return engine.TrailCursor(binary.BigEndian.Uint64(b[:8])), nil
		}
	}
	return "", &engine.Error{Kind: engine.ErrInvalid, Msg: fmt.Sprintf(
		"cursor %q: is not a cursor this trail returned (for this operator and task; cursors do not survive a restart of the server): read again without one", clip(cursor))}
}
