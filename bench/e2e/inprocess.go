package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// benchLine is one benchmark, the median of its -count runs.
type benchLine struct {
	Name        string // e.g. Corpus/decide, Size/4MiB/decide
	NsPerOp     float64
	BytesPerOp  float64
	AllocsPerOp float64
	Runs        int
}

var benchRE = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+([\d.]+) ns/op(?:\s+[\d.]+ MB/s)?\s+([\d.]+) B/op\s+([\d.]+) allocs/op`)

func goTestArgs(c config) []string {
	return []string{"go", "test", "-tags", "benchfloor", "-run", "^$", "-bench", "^Benchmark(Corpus|Size)$", "-benchmem",
		"-benchtime", c.benchtime, "-count", strconv.Itoa(c.count), "./engine/"}
}

// runGoBench runs the engine benchmarks (cmd, of goTestArgs), echoing their
// output, and returns the median of each.
func runGoBench(cmd *exec.Cmd) ([]benchLine, string, error) {
	var out bytes.Buffer
	// go test runs the test binary as a child: on Ctrl-C or the time limit,
	// stop the whole group, not only the go command.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.Stdout = io.MultiWriter(&out, os.Stderr)
	if err := cmd.Run(); err != nil {
		return nil, "", fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	lines, cpu := parseGoBench(&out)
	return lines, cpu, nil
}

// parseGoBench reads go test -bench output and returns the median of each
// benchmark over its -count runs, in the order they first appear.
func parseGoBench(r io.Reader) ([]benchLine, string) {
	samples := map[string][][3]float64{}
	var order []string
	cpu := ""
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "cpu: "); ok {
			cpu = strings.TrimSpace(v)
		}
		m := benchRE.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var v [3]float64
		for i := range v {
			v[i], _ = strconv.ParseFloat(m[i+2], 64)
		}
		if _, ok := samples[m[1]]; !ok {
			order = append(order, m[1])
		}
		samples[m[1]] = append(samples[m[1]], v)
	}
	var lines []benchLine
	for _, name := range order {
		s := samples[name]
		col := func(i int) float64 {
			xs := make([]float64, len(s))
			for k := range s {
				xs[k] = s[k][i]
			}
			return median(xs)
		}
		lines = append(lines, benchLine{Name: name, NsPerOp: col(0), BytesPerOp: col(1), AllocsPerOp: col(2), Runs: len(s)})
	}
	return lines, cpu
}

func median[T ~int64 | ~float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func findBench(lines []benchLine, name string) (benchLine, bool) {
	if i := slices.IndexFunc(lines, func(l benchLine) bool { return l.Name == name }); i >= 0 {
		return lines[i], true
	}
	return benchLine{}, false
}
