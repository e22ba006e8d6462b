package bench

import (
	"encoding/json"
	"strings"
	"testing"
)

// mcnode bench --json prints rows and targets as [] when there are none
// (a run that meets no target's conditions has no targets), never null.
func TestReportJSONEmptyLists(t *testing.T) {
	b, err := json.Marshal(Report{Command: "mcnode bench --json"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"rows":[]`, `"targets":[]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	if strings.Contains(string(b), "null") {
		t.Errorf("a null in %s", b)
	}
}
