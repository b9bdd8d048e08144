package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseGoBench(t *testing.T) {
	out := `goos: linux
cpu: Oxide Virtual Turin-like Processor             
BenchmarkCorpus/decide-2         	    3000	    400000 ns/op	   42512 B/op	     829 allocs/op
BenchmarkSize/4MiB/decide-2      	       9	 130000000 ns/op	  64.60 MB/s	23170730 B/op	  560275 allocs/op
BenchmarkCorpus/decide-2         	    3000	    300000 ns/op	   42000 B/op	     820 allocs/op
BenchmarkCorpus/decide-2         	    3000	    500000 ns/op	   43000 B/op	     830 allocs/op
PASS
`
	lines, cpu := parseGoBench(strings.NewReader(out))
	if cpu != "Oxide Virtual Turin-like Processor" {
		t.Errorf("cpu %q", cpu)
	}
	if len(lines) != 2 {
		t.Fatalf("got %+v", lines)
	}
	want := benchLine{Name: "Corpus/decide", NsPerOp: 400000, BytesPerOp: 42512, AllocsPerOp: 829, Runs: 3}
	if lines[0] != want {
		t.Errorf("got %+v, want the medians %+v", lines[0], want)
	}
	if l := lines[1]; l.Name != "Size/4MiB/decide" || l.NsPerOp != 130000000 || l.BytesPerOp != 23170730 {
		t.Errorf("MB/s column: got %+v", l)
	}
}

// TestWriteReportKeepsHistory: the first run keeps the issue-2 baseline
// section of the hand-written page; later runs keep everything below the
// marker and replace everything above it.
func TestWriteReportKeepsHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	old := "# Benchmarks\n\nold text\n\n" + baselineHeading + "\n\nbaseline table\n"
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, md := range []string{"# Benchmarks\n\nfirst run\n", "# Benchmarks\n\nsecond run\n"} {
		if err := writeReport(path, md); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(path)
		got := string(b)
		want := md + "\n" + historyMarker + "\n\n" + baselineHeading + "\n\nbaseline table\n"
		if got != want {
			t.Errorf("got:\n%s\nwant:\n%s", got, want)
		}
	}
}
