package app

import "runtime/debug"

// moduleVersion is mas-mcp's version: version when set (at build time,
// Config.Version), else the module version the go command stamped into the
// binary (a tag, or a pseudo-version of the commit, "+dirty" with
// uncommitted changes), else the VCS revision; "dev" only when none is
// known (go run, go test).
func moduleVersion(version string) string {
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
