package netns

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Isolate runs the calling test inside a private network namespace. In the
// test process it re-executes the test binary for this one test in a new
// namespace, reports the outcome and returns false: the caller returns at
// once. In the re-executed process it prepares the namespace and returns
// true: the caller goes on with the test. Where namespaces cannot be
// created, the test is skipped with a message saying how to run it.
func Isolate(t *testing.T) bool {
	t.Helper()
	if Inside() {
		if err := Prepare(); err != nil {
			t.Fatal(err)
		}
		return true
	}
	args := []string{"-test.run=^" + regexp.QuoteMeta(t.Name()) + "$", "-test.v", "-test.count=1", "-test.timeout=10m"}
	cmd := Command(t.Name(), os.Args[0], args...)
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil && Unavailable(err) {
		t.Skipf("skipped: this test needs a private network namespace for real multicast, and none can be created here (%v); run `make test` as root", err)
	}
	t.Logf("ran in a private network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("failed in its network namespace: %v", err)
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Skip("skipped in its network namespace")
	}
	return false
}
