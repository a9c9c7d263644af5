package frontend

import (
	"os"
	"path/filepath"
	"testing"

	"amspc/ir"
)

// train.data is relative to the file that names it, as cluster.profile
// is; an absolute path is kept, and a source with no directory (<stdin>)
// resolves against the working directory.
func TestDataPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	model := func(data string) []byte {
		return []byte("model m {\n  input t : i32[batch, seq]\n  param e : [16, 8]\n  param h : [8, 16]\n  loss = cross_entropy(embed(t, e) @ h, t)\n}\n" +
			"train {\n  seq_len = 4\n  global_batch = 2\n  data = \"" + data + "\"\n}\n")
	}
	abs := filepath.Join(dir, "tokens.bin")
	for _, c := range []struct {
		file, data, want string
	}{
		{"sub/m.amsp", "tokens.bin", "sub/tokens.bin"},
		{"sub/m.amsp", "../data/tokens.bin", "data/tokens.bin"},
		{"m.amsp", "tokens.bin", "tokens.bin"},
		{"<stdin>", "tokens.bin", "tokens.bin"},
		{"sub/m.amsp", abs, abs},
	} {
		job, err := Load(Source{Name: c.file, Text: model(c.data)})
		if err != nil {
			t.Errorf("%s with data %q: %v", c.file, c.data, err)
			continue
		}
		if job.Train.Data != c.want {
			t.Errorf("%s with data %q: Data is %q, want %q", c.file, c.data, job.Train.Data, c.want)
		}
	}
	// From a --train file, relative to that file, not to the model.
	job, err := Load(Source{Name: "m.amsp", Text: model("main.bin")},
		Source{Name: "sub/train.amsp", Text: []byte("train {\n  seq_len = 4\n  global_batch = 2\n  data = \"t.bin\"\n}\n"), Section: "train"})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join("sub", "t.bin"); job.Train.Data != want {
		t.Errorf("--train file's data: %q, want %q", job.Train.Data, want)
	}
}

// A file given for a section (--cluster FILE, --train FILE) that holds no
// such section is refused, naming the file and the section, rather than
// silently leaving the main file's.
func TestSourceMissingSection(t *testing.T) {
	main := Source{Name: "m.amsp", Text: []byte("model m {\n  input t : i32[2, 4]\n  param e : [16, 8]\n  param h : [8, 16]\n  loss = cross_entropy(embed(t, e) @ h, t)\n}\n" +
		"cluster {\n  gpu = \"cpu\"\n}\n")}
	cluster := Source{Name: "c.amsp", Text: []byte("cluster {\n  gpu = \"cpu\"\n  gpus_per_node = 2\n}\n")}
	train := Source{Name: "t.amsp", Text: []byte("train {\n  seq_len = 4\n  global_batch = 2\n}\n")}
	for _, c := range []struct {
		extra Source
		want  string
	}{
		{withSection(cluster, "train"), "c.amsp: --train names a file with no train section"},
		{withSection(train, "cluster"), "t.amsp: --cluster names a file with no cluster section"},
		{withSection(Source{Name: "empty.amsp"}, "train"), "empty.amsp: --train names a file with no train section"},
	} {
		_, err := Load(main, c.extra)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s as --%s: %v\nwant %s", c.extra.Name, c.extra.Section, err, c.want)
		}
	}
	if _, err := Load(main, withSection(cluster, "cluster"), withSection(train, "train")); err != nil {
		t.Errorf("files that hold their sections: %v", err)
	}
}

func withSection(s Source, section string) Source {
	s.Section = section
	return s
}

// Every float attribute an .amsp file can write has a range: a new one
// in the op table (ir.AttrSpec.Range).
func TestFloatAttrsHaveRanges(t *testing.T) {
	for _, k := range ir.OpKinds() {
		info := k.Info()
		if info.Internal {
			continue
		}
		for _, a := range info.Attrs {
			if a.Type == ir.AttrFloat && a.Range == nil {
				t.Errorf("float attribute %s of %s has no range check", a.Name, info.Name)
			}
		}
	}
}

// TestSourceTakesItsSection: a section a flag names comes from that
// flag's file, whatever another flag's file holds beside its own; the
// other sections of a file still apply (--cluster FILE with a shard
// section resolves it against that cluster).
func TestSourceTakesItsSection(t *testing.T) {
	main := Source{Name: "m.amsp", Text: []byte("model m {\n  input t : i32[batch, seq]\n  param e : [16, 8]\n  param h : [8, 16]\n  loss = cross_entropy(embed(t, e) @ h, t)\n}\n" +
		"cluster {\n  gpu = \"cpu\"\n  gpus_per_node = 2\n}\ntrain {\n  seq_len = 4\n  global_batch = 4\n}\n")}
	both := []byte("cluster {\n  gpu = \"cpu\"\n  gpus_per_node = 4\n}\ntrain {\n  seq_len = 8\n  global_batch = 16\n}\nshard zero3\n")
	cluster8 := []byte("cluster {\n  gpu = \"cpu\"\n  gpus_per_node = 8\n}\n")
	job, err := Load(main, Source{Name: "c.amsp", Text: cluster8, Section: "cluster"}, Source{Name: "t.amsp", Text: both, Section: "train"})
	if err != nil {
		t.Fatal(err)
	}
	if job.Cluster.GPUsPerNode != 8 || job.Train.SeqLen != 8 || job.Shard.Label() != "zero3" {
		t.Errorf("--cluster c.amsp --train t.amsp: %d GPUs per node (want c.amsp's 8), seq_len %d (want t.amsp's 8), shard %v (want t.amsp's zero3)",
			job.Cluster.GPUsPerNode, job.Train.SeqLen, job.Shard.Label())
	}
	job, err = Load(main, Source{Name: "c.amsp", Text: both, Section: "cluster"})
	if err != nil {
		t.Fatal(err)
	}
	if job.Cluster.GPUsPerNode != 4 || job.Train.SeqLen != 8 {
		t.Errorf("--cluster c.amsp: %d GPUs per node (want c.amsp's 4), seq_len %d (want c.amsp's 8: no --train)", job.Cluster.GPUsPerNode, job.Train.SeqLen)
	}
}
