package cost

import (
	"io"

	"amspc/cost/profile"
)

// Profile is a measured profile of collectives and kernels (package
// cost/profile, docs/profile.md); a Topology with one takes the times
// of the collectives it measured from it.
type Profile = profile.Profile

// ReadProfile reads a profile CSV. Errors name the file and line.
func ReadProfile(name string) (*Profile, error) { return profile.Read(name) }

// ParseProfile reads a profile CSV from r.
func ParseProfile(name string, r io.Reader) (*Profile, error) { return profile.Parse(name, r) }
