package skills

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/mas-mcp/mas-mcp/llm"
)

// TestEngineUsage checks that the conversion carries every field of
// llm.Usage: each gets a distinct value, and the engine's usage must
// encode to the same JSON (the two types share their JSON names).
func TestEngineUsage(t *testing.T) {
	var u llm.Usage
	v := reflect.ValueOf(&u).Elem()
	for i := range v.NumField() {
		v.Field(i).SetInt(int64(i + 1))
	}
	want, err := json.Marshal(u)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(engineUsage(u))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("engineUsage(%s) = %s", want, got)
	}
}
