package profile

import (
	"fmt"

	"amspc/ir"
)

// A SettingError is a profile that cannot be read, at the position that
// named it.
type SettingError struct {
	Pos ir.Pos
	Msg string
}

func (e *SettingError) Error() string { return e.Pos.String() + ": " + e.Msg }

// Check reads the profile a cluster names (ir.Cluster.Profile: the
// cluster section's profile setting or --profile, which the frontend
// records without reading), so that a file that cannot be read is
// reported where it was named: `file:line:col: profile "x": ...` at the
// setting, `--profile: ...` for the flag. The error is a *SettingError;
// a cluster without a profile (or no cluster) has nothing to read.
func Check(c *ir.Cluster) error {
	if c == nil || c.Profile == "" {
		return nil
	}
	if _, err := Read(c.Profile); err != nil {
		msg := err.Error()
		if c.ProfileSetting != "" {
			msg = fmt.Sprintf("profile %q: %v", c.ProfileSetting, err)
		}
		return &SettingError{Pos: c.ProfilePos, Msg: msg}
	}
	return nil
}
