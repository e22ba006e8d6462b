package mcnode_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The papers are cited by author and year, the same year everywhere
// (Pearlin's thesis is of 2003, Cao and Singhal's paper of 1998), and
// never by the number of a source file the project was given: a reader
// has the papers, not those files.
func TestCitationsAgree(t *testing.T) {
	years := []struct {
		re   *regexp.Regexp
		want string
	}{
		{regexp.MustCompile(`Pearlin[^.;]{0,40}?\b((?:19|20)\d\d)\b`), "2003"},
		{regexp.MustCompile(`Cao (?:and|&) Singhal[^.;]{0,20}?\b((?:19|20)\d\d)\b`), "1998"},
	}
	seedFile := regexp.MustCompile(`(?i)\bseeds? 0\d\d\b|\bseeds?/0\d\d`)
	checked := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != "." {
			return filepath.SkipDir
		}
		if d.IsDir() || path == "citations_test.go" || !strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, ".md") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := strings.Join(strings.Fields(string(b)), " ") // a citation may break across lines
		for _, y := range years {
			for _, m := range y.re.FindAllStringSubmatch(text, -1) {
				checked++
				if m[1] != y.want {
					t.Errorf("%s: %q: the year is %s", path, m[0], y.want)
				}
			}
		}
		for _, m := range seedFile.FindAllString(text, -1) {
			t.Errorf("%s: cites %q: cite the paper by author and year", path, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 3 {
		t.Errorf("only %d citations with a year found: the test reads the wrong files", checked)
	}
}
