package game

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// mcnode game --headless --json ends with a line whose lists are [] when
// empty (a player that took nothing, a game without records), never null.
func TestLogJSONEmptyLists(t *testing.T) {
	for _, results := range [][]Result{nil, {{Player: "bot1"}}} {
		var out bytes.Buffer
		NewLog(&out, true).End(1000, results)
		line := strings.TrimSpace(out.String())
		var end struct {
			Scoreboard json.RawMessage   `json:"scoreboard"`
			Nodes      []json.RawMessage `json:"nodes"`
		}
		if err := json.Unmarshal([]byte(line), &end); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if string(end.Scoreboard) != "[]" || end.Nodes == nil {
			t.Errorf("%d records: %s, want an empty scoreboard and a list of nodes", len(results), line)
		}
		for _, want := range []string{`"takes":[]`, `"wins":[]`} {
			if len(results) > 0 && !strings.Contains(line, want) {
				t.Errorf("a record without takes or wins: %s lacks %s", line, want)
			}
		}
		if strings.Contains(strings.ReplaceAll(line, `"winner":null`, ""), "null") {
			t.Errorf("a null list in %s", line)
		}
	}
}
