package capture

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"
)

// sameString reports whether a and b share their bytes: one allocation.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// TestDecoderInterns: two execs of one shell in one container share the
// strings they repeat, and each still decodes as a fresh decoder reads it.
func TestDecoderInterns(t *testing.T) {
	d := NewDecoder(fxKeys, fxBootTime)
	first := decodeOK(t, d, encodeFrame(t, ptr(fixtureExec())))
	r := fixtureExec()
	r.Tgid, r.StartNs = 4300, 200_000_000_000 // a sibling: same parent, cgroup, file, ID
	second := decodeOK(t, d, encodeFrame(t, &r))
	for name, pair := range map[string][2]string{
		"cgroup":    {first.Cgroup, second.Cgroup},
		"container": {first.ContainerID, second.ContainerID},
		"pod":       {first.PodUID, second.PodUID},
		"filename":  {first.Filename, second.Filename},
		"audit ID":  {first.AuditID, second.AuditID},
		"parent":    {first.ParentProcessID, second.ParentProcessID},
		"root":      {first.SessionRootID, second.SessionRootID},
	} {
		if !sameString(pair[0], pair[1]) {
			t.Errorf("%s %q decoded twice into two strings", name, pair[0])
		}
	}
	// Positive control: what differs is not shared.
	if first.ProcessID == second.ProcessID || first.ProcessID != "4242-12345" || second.ProcessID != "4300-20000" {
		t.Errorf("siblings decoded as %q and %q", first.ProcessID, second.ProcessID)
	}
	if got, want := normalize(first), normalize(fixtureExecEvent()); !reflect.DeepEqual(got, want) {
		t.Errorf("first exec decoded as\n%+v\nwant\n%+v", got, want)
	}
}

// TestDecoderInternBounded floods the decoder with more distinct
// cgroups, file names and audit IDs than its tables hold: every event
// decodes as a fresh decoder reads it, and the tables stay bounded.
func TestDecoderInternBounded(t *testing.T) {
	d := NewDecoder(fxKeys, fxBootTime)
	n := 3 * max(maxInternedCgroups, maxInternedStrings)
	for i := range n {
		r := fixtureExec()
		r.Tgid, r.Ppid, r.ParentStartNs = uint32(5000+i), uint32(4100+i%3), uint64(i%5)*ticksNs
		r.FilenameLen = setCString(r.Filename[:], fmt.Sprintf("/tmp/build-%d/cc1", i))
		// A digit moves between the parent's name and the leaf's: a key
		// that only concatenated the two would take one pair for the other.
		parent, leaf := "pod"+fxPodUID+"1", fmt.Sprintf("%d%s", i%7, fxCtrID)
		if i%2 == 1 {
			parent, leaf = fmt.Sprintf("pod%s1%d", fxPodUID, i%7), fxCtrID
		}
		r.CgroupParentLen = setCString(r.CgroupParent[:], parent)
		r.CgroupLen = setCString(r.Cgroup[:], leaf)
		setSlot(&r.Ids[0], fmt.Sprintf("%s%06d", fxAuditID[:30], i), correlatorIdSourceID_SOURCE_ENV, 0)
		frame := encodeFrame(t, &r)
		got := decodeOK(t, d, frame)
		want := decodeOK(t, NewDecoder(fxKeys, fxBootTime), frame)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("event %d decoded as\n%+v\nwhere a fresh decoder reads\n%+v", i, got, want)
		}
		if got.Cgroup != parent+"/"+leaf {
			t.Fatalf("event %d: cgroup %q", i, got.Cgroup)
		}
	}
	if len(d.cgroups.m) > maxInternedCgroups || len(d.strs.m) > maxInternedStrings {
		t.Errorf("tables hold %d cgroups and %d strings, bounds %d and %d",
			len(d.cgroups.m), len(d.strs.m), maxInternedCgroups, maxInternedStrings)
	}
}

func ptr[T any](v T) *T { return &v }
