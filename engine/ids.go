package engine

import (
	"strings"

	"github.com/google/uuid"
)

// idSpace is the UUID namespace of derived IDs.
var idSpace = uuid.MustParse("6f0e2b0a-4c1d-5e7a-9b3c-2d8f1a6e4b75")

// newID is a fresh random ID.
func newID() string { return uuid.NewString() }

// derivedID is the stable ID of something an origin (a step, a message, a
// stage) creates: when the origin runs again after a restart, what it
// creates gets the same IDs, so its effects apply once (a message is
// delivered once, a stage added once). An empty origin means a fresh ID.
func derivedID(origin string, parts ...string) string {
	if origin == "" {
		return newID()
	}
	return uuid.NewSHA1(idSpace, []byte(origin+"/"+strings.Join(parts, "/"))).String()
}
