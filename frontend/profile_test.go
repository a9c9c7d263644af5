package frontend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"amspc/cost/profile"
)

// A cluster's profile path is relative to the file that names it, not to
// the working directory, and Options.Profile (--profile) replaces it. The
// frontend only records the path and where it was named; reading it
// (profile.Check) fails at the setting's position, or at --profile.
func TestProfilePath(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	model := func(profile string) string {
		return "model m {\n  input t : i32[2, 4]\n  param e : [16, 8]\n  param h : [8, 16]\n  loss = cross_entropy(embed(t, e) @ h, t)\n}\n" +
			"cluster {\n  nodes = 1\n  gpus_per_node = 2\n  gpu = \"cpu\"\n  profile = \"" + profile + "\"\n}\n"
	}
	write("sub/good.amsp", model("p.csv"))
	write("sub/missing.amsp", model("none.csv"))
	write("sub/bad.amsp", model("bad.csv"))
	write("sub/p.csv", "collective,s0,s1,bytes,effective_gbps\nall_gather,2,1,4096,1\n")
	write("sub/bad.csv", "# amspc profile v2\nkernel,shapes,dtype,flops,seconds\nmatmul,2x2;2x2,f32,16\n")
	write("other/x", "")
	t.Chdir(filepath.Join(dir, "other"))
	load := func(name string, opts Options) (string, error) {
		t.Helper()
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		job, err := LoadWith(opts, Source{Name: name, Text: b})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return job.Cluster.Profile, profile.Check(job.Cluster)
	}
	if got, err := load("../sub/good.amsp", Options{}); err != nil || got != "../sub/p.csv" {
		t.Errorf("profile beside the model: %q, %v; want ../sub/p.csv", got, err)
	}
	_, err := load("../sub/missing.amsp", Options{})
	if want := `../sub/missing.amsp:11:3: profile "none.csv": open ../sub/none.csv: no such file or directory`; err == nil || err.Error() != want {
		t.Errorf("missing profile: %v\nwant %s", err, want)
	}
	_, err = load("../sub/bad.amsp", Options{})
	if want := `../sub/bad.amsp:11:3: profile "bad.csv": ../sub/bad.csv:3: want 5 fields`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("malformed profile: %v\nwant %s...", err, want)
	}
	if got, err := load("../sub/missing.amsp", Options{Profile: "../sub/p.csv"}); err != nil || got != "../sub/p.csv" {
		t.Errorf("--profile over a missing one: %q, %v", got, err)
	}
	_, err = load("../sub/good.amsp", Options{Profile: "nope.csv"})
	if want := "--profile: open nope.csv: no such file or directory"; err == nil || err.Error() != want {
		t.Errorf("missing --profile: %v\nwant %s", err, want)
	}
}
