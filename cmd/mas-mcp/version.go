package main

import "runtime/debug"

// version is set at build time (-ldflags "-X main.version=…"); otherwise
// moduleVersion reads it from the build information.
var version = ""

// moduleVersion is mas-mcp's version: the one set at build time, else the
// module version the go command stamped into the binary (a tag, or a
// pseudo-version of the commit, "+dirty" with uncommitted changes), else
// the VCS revision; "dev" only when none is known (go run, go test).
func moduleVersion() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return versionOf(bi)
}

// versionOf picks the version out of build information.
func versionOf(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "+dirty"
	}
	return "devel-" + rev
}
