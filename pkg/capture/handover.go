package capture

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/ringbuf"
)

// An upgrade or rollback finds another build pinned beside its own. The new
// build copies the old lineage into its own map, attaches its programs,
// detaches the old ones, copies again (what the old programs wrote in
// between), drains the old ring, and only then removes the old pins. For
// the microseconds both run, forks are tracked by both.
//
// Entries are copied field by field by name, as the BTF each map was
// created with describes struct lineage: any two builds can hand over in
// either direction without a table of known layouts, and a field one side
// lacks is zero on the other. A map without BTF (never made by correlator)
// is not copied; its sessions are found again through procfs, flagged.

// HandoverStats says what the last start took over from other builds.
type HandoverStats struct {
	Builds   int // builds retired
	Copied   int // lineage entries copied into this build's map
	Lost     int // entries that could not be copied (map full, no BTF)
	Drained  int // events read from the old rings
	Detached int // old links detached
}

// copyLineageFrom copies dir's pinned lineage into this build's map. Entries
// this build already holds win: its own programs wrote them.
func (p *Probe) copyLineageFrom(dir string) (copied, lost int, err error) {
	old, err := ebpf.LoadPinnedMap(filepath.Join(dir, "lineage_map"), &ebpf.LoadPinOptions{ReadOnly: true})
	if errors.Is(err, os.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("loading pinned lineage in %s: %w", dir, err)
	}
	defer old.Close()
	oldT, err := mapStruct(old, "lineage")
	if err != nil {
		n := 0
		for it, k, v := old.Iterate(), uint32(0), []byte(nil); it.Next(&k, &v); {
			n++
		}
		return 0, n, err
	}
	newSize := int(p.objs.LineageMap.ValueSize())
	var (
		key uint32
		val []byte
		out = make([]byte, newSize)
	)
	it := old.Iterate()
	for it.Next(&key, &val) {
		clear(out)
		copyByName(out, p.lineageType, val, oldT)
		switch err := p.objs.LineageMap.Update(key, out, ebpf.UpdateNoExist); {
		case err == nil:
			copied++
		case errors.Is(err, ebpf.ErrKeyExist):
		default:
			lost++
		}
	}
	if err := it.Err(); err != nil {
		return copied, lost, fmt.Errorf("iterating pinned lineage in %s: %w", dir, err)
	}
	return copied, lost, nil
}

// mapStruct finds the struct called name in the BTF m was created with.
func mapStruct(m *ebpf.Map, name string) (*btf.Struct, error) {
	info, err := m.Info()
	if err != nil {
		return nil, fmt.Errorf("reading map info: %w", err)
	}
	id, ok := info.BTFID()
	if !ok {
		return nil, fmt.Errorf("reading layout of map %s: created without BTF", info.Name)
	}
	h, err := btf.NewHandleFromID(id)
	if err != nil {
		return nil, fmt.Errorf("loading BTF of map %s: %w", info.Name, err)
	}
	defer h.Close()
	spec, err := h.Spec(nil)
	if err != nil {
		return nil, fmt.Errorf("parsing BTF of map %s: %w", info.Name, err)
	}
	var st *btf.Struct
	if err := spec.TypeByName(name, &st); err != nil {
		return nil, fmt.Errorf("finding struct %s in BTF of map %s: %w", name, info.Name, err)
	}
	if st.Size != info.ValueSize {
		return nil, fmt.Errorf("reading layout of map %s: struct %s is %d bytes, values %d", info.Name, name, st.Size, info.ValueSize)
	}
	return st, nil
}

// copyByName copies src (of type st) into dst (of type dt): struct members
// by name, arrays element by element, scalars little-endian, cut or
// zero-extended. Padding members (_pad*) are left zero.
func copyByName(dst []byte, dt btf.Type, src []byte, st btf.Type) {
	dt, st = btf.UnderlyingType(dt), btf.UnderlyingType(st)
	switch d := dt.(type) {
	case *btf.Struct:
		s, ok := st.(*btf.Struct)
		if !ok {
			return
		}
		for _, dm := range d.Members {
			if dm.Name == "" || dm.BitfieldSize != 0 || strings.HasPrefix(dm.Name, "_pad") {
				continue
			}
			for _, sm := range s.Members {
				if sm.Name != dm.Name || sm.BitfieldSize != 0 {
					continue
				}
				dsz, err1 := btf.Sizeof(dm.Type)
				ssz, err2 := btf.Sizeof(sm.Type)
				do, so := int(dm.Offset.Bytes()), int(sm.Offset.Bytes())
				if err1 == nil && err2 == nil && do+dsz <= len(dst) && so+ssz <= len(src) {
					copyByName(dst[do:do+dsz], dm.Type, src[so:so+ssz], sm.Type)
				}
				break
			}
		}
	case *btf.Array:
		s, ok := st.(*btf.Array)
		if !ok {
			return
		}
		de, err1 := btf.Sizeof(d.Type)
		se, err2 := btf.Sizeof(s.Type)
		if err1 != nil || err2 != nil {
			return
		}
		for i := 0; i < int(min(d.Nelems, s.Nelems)) && (i+1)*de <= len(dst) && (i+1)*se <= len(src); i++ {
			copyByName(dst[i*de:(i+1)*de], d.Type, src[i*se:(i+1)*se], s.Type)
		}
	default:
		copy(dst, src)
	}
}

// sharedPlaces returns the newest old build's image places when this build
// can use that map as it is (same kind, sizes and capacity), so no task loses
// its provenance in a handover. Task storage cannot be listed from
// userspace; a changed layout starts empty, and roots exec'd by images
// that predate it read as unverified (the safe side).
func sharedPlaces(spec *ebpf.CollectionSpec, old []string) *ebpf.Map {
	for i := len(old) - 1; i >= 0; i-- {
		m, err := ebpf.LoadPinnedMap(filepath.Join(old[i], "image_places"), nil)
		if err != nil {
			continue
		}
		want := spec.Maps["image_places"]
		info, err := m.Info()
		if err == nil && info.Type == want.Type && info.ValueSize == want.ValueSize && info.KeySize == want.KeySize && info.MaxEntries == want.MaxEntries {
			return m
		}
		m.Close()
	}
	return nil
}

// handoverCopy copies every other build's lineage into this build's map:
// once before this build's programs attach (the bulk), and again by
// handoverFinish after the old programs are detached.
func (p *Probe) handoverCopy() {
	for _, dir := range p.old {
		c, l, err := p.copyLineageFrom(dir)
		p.handed.Copied += c
		p.handed.Lost += l
		if err != nil {
			p.log.Warn().Err(err).Str("build", filepath.Base(dir)).Msg("copying pinned lineage")
		}
	}
}

func (p *Probe) handoverFinish() {
	for _, dir := range p.old {
		n, err := detachPinned(dir)
		p.handed.Detached += n
		if err != nil {
			p.log.Warn().Err(err).Str("build", filepath.Base(dir)).Msg("detaching old probes")
		}
	}
	p.handed.Lost = 0 // the second pass sees every entry again
	p.handoverCopy()
	for _, dir := range p.old {
		p.drainOld(dir)
		if _, err := removeBuild(p.cfg.PinPath, dir); err != nil {
			p.log.Warn().Err(err).Str("build", filepath.Base(dir)).Msg("removing old pins")
		}
		p.handed.Builds++
	}
	p.log.Info().Int("builds", p.handed.Builds).Int("copied", p.handed.Copied).Int("lost", p.handed.Lost).
		Int("drained", p.handed.Drained).Int("detached", p.handed.Detached).Msg("took over from another build")
	p.old = nil
}

// drainOld reads what the old programs left in their ring; it is delivered
// first by Run. Frames of another event layout are counted as bad.
func (p *Probe) drainOld(dir string) {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "events"), nil)
	if err != nil {
		return
	}
	defer m.Close()
	if hb, ok := readHeartbeat(dir); ok {
		p.noteWindow(hb, pinnedDrops(dir), "taking over another build's pinned probes")
	}
	r, err := ringbuf.NewReader(m)
	if err != nil {
		p.log.Warn().Err(err).Msg("opening old ring buffer")
		return
	}
	defer r.Close()
	var rec ringbuf.Record
	for r.AvailableBytes() > 0 {
		r.SetDeadline(time.Now().Add(p.cfg.FlushInterval))
		if err := r.ReadInto(&rec); err != nil {
			break
		}
		ev, err := p.dec.Decode(rec.RawSample)
		if err != nil {
			p.badOld++
			continue
		}
		p.pending = append(p.pending, ev)
		p.handed.Drained++
	}
}

// pinnedDrops sums the ring drops a pinned stats map counted.
func pinnedDrops(dir string) uint64 {
	m, err := ebpf.LoadPinnedMap(filepath.Join(dir, "stats"), &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return 0
	}
	defer m.Close()
	var per []uint64
	if m.Lookup(uint32(correlatorStatIndexSTAT_RINGBUF_DROPS), &per) != nil {
		return 0
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}
