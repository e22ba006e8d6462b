package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/urfave/cli/v2"
)

// version is what mcnode --version and mcnode version print after "mcnode
// version ": the module's version, the commit it was built from and the Go
// that built it, as the go command recorded them in the binary.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return fmt.Sprintf("unknown (no build information), %s %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	}
	return versionOf(info, runtime.GOOS+"/"+runtime.GOARCH)
}

// buildRevision, buildTime and buildModified stand in for the go command's
// vcs.revision, vcs.time and vcs.modified where it recorded none: make build
// sets them (-ldflags -X) from git, since go build records nothing with
// -buildvcs=false (in GOFLAGS, say), nor in a git worktree, whose .git is a
// file go build does not take for a checkout's.
var buildRevision, buildTime, buildModified string

// versionOf renders the build information info of a binary for platform.
// A release (go install ...@v1.2.0) gives
//
//	v1.2.0, go1.26.0 linux/amd64
//
// and a build from a checkout (go build records the commit with -buildvcs,
// the default in a repository) names its commit, and whether the tree had
// changes:
//
//	v1.2.1-0.20260102150405-7f11a7c4e2b1+dirty, commit 7f11a7c4e2b1d7e2b8a0f6c5d4e3b2a1f0e9d8c7 of 2026-01-02T15:04:05Z, modified, go1.26.0 linux/amd64
//
// A build with neither (go run, -buildvcs=false, a git worktree, unless
// make build set buildRevision) is "(devel)", says it recorded no commit,
// and still names the Go that built it:
//
//	(devel), no commit recorded, go1.26.0 linux/amd64
func versionOf(info *debug.BuildInfo, platform string) string {
	v := info.Main.Version
	if v == "" {
		v = "(devel)" // a test binary, say
	}
	parts := []string{v}
	var rev, at, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" && buildRevision != "" {
		rev, at, modified = buildRevision, buildTime, buildModified
	}
	if rev != "" {
		commit := "commit " + rev
		if at != "" {
			commit += " of " + at
		}
		parts = append(parts, commit)
		if modified == "true" {
			parts = append(parts, "modified")
		}
	} else if v == "(devel)" {
		parts = append(parts, "no commit recorded")
	}
	goVersion := info.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	return strings.Join(append(parts, goVersion+" "+platform), ", ")
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print mcnode's version, the commit it was built from and the Go that built it (as --version does)",
		Action: func(c *cli.Context) error {
			if err := noArguments(c); err != nil {
				return err
			}
			cli.ShowVersion(c)
			return nil
		},
		OnUsageError: onUsageError,
	}
}
