package capture

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"
)

// Object names the BPF object Load uses. Both carry the same programs, maps
// and guarantees; they differ in what they ask of the kernel.
type Object string

const (
	// ObjectAuto probes the kernel: the default object where it loads, the
	// compat object otherwise.
	ObjectAuto Object = "auto"
	// ObjectDefault keeps image places in task storage and scans the
	// environment with bpf_loop: kernels 5.17 and later.
	ObjectDefault Object = "default"
	// ObjectCompat keeps image places in a hash map freed at exit and scans
	// with bounded loops of global functions: kernels 5.10 and later (tp_btf,
	// ring buffer, global functions).
	ObjectCompat Object = "compat"
)

// ErrKernelFeature is wrapped by Load's refusal of a kernel that lacks what
// the chosen object needs.
var ErrKernelFeature = errors.New("kernel feature missing")

// build is one compiled BPF object. The agent ships two (chooseBuild picks);
// the handover test loads a second layout of each.
type build struct {
	name string
	obj  []byte
}

func defaultBuild() build { return build{name: "correlator", obj: _CorrelatorBytes} }
func compatBuild() build  { return build{name: "correlator-compat", obj: _CorrelatorCompatBytes} }

// chooseBuild returns the object for want on the running kernel. Auto takes
// the default object when the kernel has everything it uses, else the compat
// object; a forced object, or compat under auto, is refused when the kernel
// lacks something it uses, with the kernel's release and each missing
// feature named: never a silently weaker probe.
func chooseBuild(want Object) (build, error) {
	switch want {
	case ObjectDefault:
		return requireBuild(defaultBuild())
	case ObjectCompat:
		return requireBuild(compatBuild())
	case ObjectAuto, "":
		if missingFeatures(defaultBuild().obj) == nil {
			return defaultBuild(), nil
		}
		return requireBuild(compatBuild())
	}
	return build{}, fmt.Errorf("choosing BPF object %q: must be %q, %q or %q", want, ObjectAuto, ObjectDefault, ObjectCompat)
}

func requireBuild(b build) (build, error) {
	if err := missingFeatures(b.obj); err != nil {
		return build{}, fmt.Errorf("loading BPF object %s: kernel %s: %w", b.name, kernelRelease(), err)
	}
	return b, nil
}

// featureSince says when each feature an object may miss came, for errors.
var featureSince = map[string]string{
	ebpf.TaskStorage.String():         "5.11",
	ebpf.RingBuf.String():             "5.8",
	asm.FnTaskStorageGet.String():     "5.11 (tracing programs)",
	asm.FnLoop.String():               "5.17",
	asm.FnRingbufOutput.String():      "5.8",
	asm.FnRingbufQuery.String():       "5.8",
	asm.FnKtimeGetBootNs.String():     "5.8",
	asm.FnProbeReadKernelStr.String(): "5.5",
	asm.FnProbeReadUser.String():      "5.5",
	asm.FnProbeReadKernel.String():    "5.5",
}

// missingFeatures probes the running kernel (cilium/ebpf's features, and a
// load per helper for tracing programs) for each map type obj declares and
// each helper its programs call, and returns one error naming all it lacks.
func missingFeatures(obj []byte) error {
	spec, err := ebpf.LoadCollectionSpecFromReader(bytes.NewReader(obj))
	if err != nil {
		return fmt.Errorf("reading BPF spec: %w", err)
	}
	var missing []string
	lacks := func(what, key string, err error) {
		if since := featureSince[key]; since != "" {
			what += " (since " + since + ")"
		}
		missing = append(missing, fmt.Sprintf("%s: %v", what, err))
	}
	seenMap := map[ebpf.MapType]bool{}
	for _, name := range sortedKeys(spec.Maps) {
		mt := spec.Maps[name].Type
		if seenMap[mt] {
			continue
		}
		seenMap[mt] = true
		if err := features.HaveMapType(mt); err != nil {
			lacks(fmt.Sprintf("map type %s (map %s)", mt, name), mt.String(), err)
		}
	}
	type use struct {
		pt ebpf.ProgramType
		fn asm.BuiltinFunc
	}
	seenFn := map[use]bool{}
	for _, name := range sortedKeys(spec.Programs) {
		p := spec.Programs[name]
		for _, ins := range p.Instructions {
			if !ins.IsBuiltinCall() {
				continue
			}
			u := use{p.Type, asm.BuiltinFunc(ins.Constant)}
			if seenFn[u] {
				continue
			}
			seenFn[u] = true
			if err := haveHelper(p, u.fn); err != nil {
				lacks(fmt.Sprintf("helper %s for %s programs (first in %s)", helperName(u.fn), u.pt, name), u.fn.String(), err)
			}
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrKernelFeature, strings.Join(missing, "; "))
}

// haveHelper loads a program of p's type and attach point that calls fn
// with its arguments unset: a kernel without the helper refuses the call
// itself ("unknown func"), one with it refuses the unset arguments.
// (features.HaveProgramHelper has no probe for tracing programs.)
func haveHelper(p *ebpf.ProgramSpec, fn asm.BuiltinFunc) error {
	prog, err := ebpf.NewProgramWithOptions(&ebpf.ProgramSpec{
		Type:       p.Type,
		AttachType: p.AttachType,
		AttachTo:   p.AttachTo,
		License:    "GPL",
		Instructions: asm.Instructions{
			fn.Call(),
			asm.LoadImm(asm.R0, 0, asm.DWord),
			asm.Return(),
		},
	}, ebpf.ProgramOptions{LogLevel: ebpf.LogLevelBranch})
	if err == nil {
		prog.Close()
		return nil
	}
	var verr *ebpf.VerifierError
	if !errors.As(err, &verr) {
		return fmt.Errorf("probing: %w", err)
	}
	for _, l := range verr.Log {
		if strings.Contains(l, "unknown func") || strings.Contains(l, "invalid func") {
			return errors.New(l)
		}
	}
	return nil
}

// helperName is fn as the kernel spells it: FnKtimeGetBootNs is
// bpf_ktime_get_boot_ns.
func helperName(fn asm.BuiltinFunc) string {
	var b strings.Builder
	b.WriteString("bpf")
	for _, r := range strings.TrimPrefix(fn.String(), "Fn") {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// kernelRelease is uname -r, for errors that name the kernel.
func kernelRelease() string {
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return "(unknown release)"
	}
	return unix.ByteSliceToString(uts.Release[:])
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
