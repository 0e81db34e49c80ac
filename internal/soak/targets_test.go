package soak

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

// passing are figures that meet every default target, and the store
// and WAL targets set in testTargets.
func passing() Figures {
	return Figures{
		MemorySlopeMiBPerHour: 0.3, HeapSlopeMiBPerHour: -0.1, MaxAnonMiB: 48, CPUPerExecChangePct: -2,
		QueryP99MS: 3.2, Lost: 0, RingDrops: 0, MaxStoreMiB: 200, MaxWALMiB: 8,
	}
}

func testTargets() Targets {
	t := DefaultTargets()
	t.MaxStoreMiB, t.MaxWALMiB = 256, 64
	return t
}

func TestCheck(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		name  string
		edit  func(*Figures)
		short []string // the lines Check gives for a short run
		long  []string // and for a long one
	}{
		{"all met", func(*Figures) {}, nil, nil},
		{"at the targets", func(f *Figures) {
			f.MemorySlopeMiBPerHour, f.HeapSlopeMiBPerHour, f.MaxAnonMiB, f.CPUPerExecChangePct = 2, 2, 100, 10
			f.QueryP99MS, f.MaxStoreMiB, f.MaxWALMiB = 10, 256, 64
		}, nil, nil},
		{"memory slope", func(f *Figures) { f.MemorySlopeMiBPerHour = 3.1 },
			nil, []string{"memory slope 3.1 MiB/h over the 2 MiB/h target"}},
		{"heap slope", func(f *Figures) { f.HeapSlopeMiBPerHour = 2.25 },
			nil, []string{"heap slope 2.25 MiB/h over the 2 MiB/h target"}},
		{"slope not measured", func(f *Figures) { f.MemorySlopeMiBPerHour = nan },
			nil, []string{"memory slope not measured (too few samples), target 2 MiB/h"}},
		{"CPU per exec", func(f *Figures) { f.CPUPerExecChangePct = 12.345 },
			nil, []string{"CPU per exec change 12.35% over the 10% target"}},
		{"max RssAnon", func(f *Figures) { f.MaxAnonMiB = 120.5 },
			[]string{"max RssAnon 120.5 MiB over the 100 MiB target"}, []string{"max RssAnon 120.5 MiB over the 100 MiB target"}},
		{"RssAnon not measured", func(f *Figures) { f.MaxAnonMiB = nan },
			[]string{"max RssAnon not measured (too few samples), target 100 MiB"},
			[]string{"max RssAnon not measured (too few samples), target 100 MiB"}},
		{"query p99", func(f *Figures) { f.QueryP99MS = 10.01 },
			nil, []string{"query p99 10.01 ms over the 10 ms target"}},
		{"lost", func(f *Figures) { f.Lost = 1 },
			[]string{"requests lost 1 over the 0 target"}, []string{"requests lost 1 over the 0 target"}},
		{"ring drops", func(f *Figures) { f.RingDrops = 7 },
			[]string{"ring buffer drops 7 over the 0 target"}, []string{"ring buffer drops 7 over the 0 target"}},
		{"store", func(f *Figures) { f.MaxStoreMiB = 300 },
			[]string{"max store 300 MiB over the 256 MiB target"}, []string{"max store 300 MiB over the 256 MiB target"}},
		{"WAL", func(f *Figures) { f.MaxWALMiB = 65 },
			[]string{"max WAL 65 MiB over the 64 MiB target"}, []string{"max WAL 65 MiB over the 64 MiB target"}},
		{"several", func(f *Figures) { f.MemorySlopeMiBPerHour, f.Lost = 5, 2 },
			[]string{"requests lost 2 over the 0 target"},
			[]string{"memory slope 5 MiB/h over the 2 MiB/h target", "requests lost 2 over the 0 target"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := passing()
			c.edit(&f)
			if got := testTargets().Check(f, false); !reflect.DeepEqual(got, c.short) {
				t.Errorf("short run: %q, want %q", got, c.short)
			}
			if got := testTargets().Check(f, true); !reflect.DeepEqual(got, c.long) {
				t.Errorf("long run: %q, want %q", got, c.long)
			}
		})
	}
}

// With no store or WAL target set, any size passes.
func TestCheckUnsetTargets(t *testing.T) {
	f := passing()
	f.MaxStoreMiB, f.MaxWALMiB = 1e6, 1e6
	if got := DefaultTargets().Check(f, true); got != nil {
		t.Errorf("%q, want nothing: the store and WAL have no default target", got)
	}
}

func TestCheckReport(t *testing.T) {
	f := passing()
	f.QueryP99MS, f.CPUPerExecChangePct = 12, math.NaN()
	short := testTargets().Report(f, false)
	for _, want := range []string{
		"memory slope         0.3 MiB/h      ≤ 2 MiB/h      not judged (short run)\n",
		"CPU per exec change  n/a            ≤ 10%          not judged (short run)\n",
		"query p99            12 ms          ≤ 10 ms        not judged (short run)\n",
		"max RssAnon          48 MiB         ≤ 100 MiB      ok\n",
	} {
		if !strings.Contains(short, want) {
			t.Errorf("no %q in\n%s", want, short)
		}
	}
	long := DefaultTargets().Report(f, true)
	for _, want := range []string{
		"memory slope         0.3 MiB/h      ≤ 2 MiB/h      ok\n",
		"CPU per exec change  n/a            ≤ 10%          not measured\n",
		"max store            200 MiB                       no target\n",
	} {
		if !strings.Contains(long, want) {
			t.Errorf("no %q in\n%s", want, long)
		}
	}
}
