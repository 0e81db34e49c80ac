package meta

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"sigs.k8s.io/yaml"
)

// parsePodMap parses a pod map: a JSON or YAML list of Info. A document whose
// first non-blank character is '[' is JSON; anything else is YAML. An empty
// document is an empty map. Every entry needs a containerID or, for an entry
// that covers every container of a pod, a podUID. IDs are lowercased and
// must be unique. An entry's optional labels (a map of strings; YAML
// numbers and booleans become their text) are the pod's, kept verbatim;
// an empty map is no labels.
func parsePodMap(data []byte) ([]Info, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf"))
	trimmed := bytes.TrimSpace(data)
	var entries []Info
	if len(trimmed) > 0 && trimmed[0] == '[' {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&entries); err != nil {
			return nil, fmt.Errorf("parsing pod map as JSON: %w", jsonPosition(data, err))
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, errors.New("parsing pod map as JSON: data after the list")
		}
	} else if err := yaml.UnmarshalStrict(data, &entries); err != nil {
		return nil, fmt.Errorf("parsing pod map as YAML: %w", err)
	}
	for i := range entries {
		e := &entries[i]
		e.ContainerID = strings.ToLower(strings.TrimSpace(e.ContainerID))
		e.PodUID = strings.ToLower(strings.TrimSpace(e.PodUID))
		e.Namespace = strings.TrimSpace(e.Namespace)
		e.Pod = strings.TrimSpace(e.Pod)
		e.Container = strings.TrimSpace(e.Container)
		if len(e.Labels) == 0 {
			e.Labels = nil
		}
	}
	if _, err := NewStatic(entries); err != nil {
		return nil, fmt.Errorf("parsing pod map: %w", err)
	}
	if entries == nil {
		entries = []Info{}
	}
	return entries, nil
}

// jsonPosition adds a line and column to a JSON decoding error.
func jsonPosition(data []byte, err error) error {
	var offset int64 = -1
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		offset = syn.Offset
	case errors.As(err, &typ):
		offset = typ.Offset
	case errors.Is(err, io.ErrUnexpectedEOF):
		offset = int64(len(data))
	}
	if offset < 0 || offset > int64(len(data)) {
		return err
	}
	before := data[:offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := int(offset) - bytes.LastIndexByte(before, '\n')
	return fmt.Errorf("line %d column %d: %w", line, col, err)
}

// Static resolves containers from a fixed list: by container ID, then by pod
// UID for entries that have no container ID.
type Static struct {
	byID  map[string]Info
	byPod map[string]Info
}

// NewStatic indexes entries. Duplicate IDs and entries without an ID are
// errors.
func NewStatic(entries []Info) (*Static, error) {
	s := &Static{byID: make(map[string]Info, len(entries)), byPod: map[string]Info{}}
	firstID := map[string]int{}
	firstPod := map[string]int{}
	for i, e := range entries {
		cid, uid := strings.ToLower(e.ContainerID), strings.ToLower(e.PodUID)
		switch {
		case cid != "":
			if j, dup := firstID[cid]; dup {
				return nil, fmt.Errorf("entry %d: duplicate containerID %q (first in entry %d)", i, e.ContainerID, j)
			}
			firstID[cid] = i
			s.byID[cid] = e
		case uid != "":
			if j, dup := firstPod[uid]; dup {
				return nil, fmt.Errorf("entry %d: duplicate pod-wide podUID %q (first in entry %d)", i, e.PodUID, j)
			}
			firstPod[uid] = i
			s.byPod[uid] = e
		default:
			return nil, fmt.Errorf("entry %d: needs a containerID or a podUID", i)
		}
	}
	return s, nil
}

// Resolve looks the container up by ID, then its pod by UID.
func (s *Static) Resolve(_ context.Context, containerID, podUID string) (Info, bool, error) {
	if containerID != "" {
		if info, ok := s.byID[strings.ToLower(containerID)]; ok {
			if info.PodUID == "" {
				info.PodUID = podUID
			}
			return info, true, nil
		}
	}
	if podUID != "" {
		if info, ok := s.byPod[strings.ToLower(podUID)]; ok {
			info.ContainerID = containerID
			return info, true, nil
		}
	}
	return Info{}, false, nil
}

// podMapFile is a Static loaded from a file, reloaded when the file's
// modification time or size changes (checked with one stat per Resolve). A
// reload that fails keeps the previous map.
type podMapFile struct {
	path string
	log  zerolog.Logger

	mu      sync.RWMutex
	static  *Static
	modTime time.Time
	size    int64
}

func loadPodMapFile(path string, log zerolog.Logger) (*podMapFile, error) {
	p := &podMapFile{path: path, log: log.With().Str("podMap", path).Logger()}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading pod map: %w", err)
	}
	if err := p.load(fi); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *podMapFile) load(fi os.FileInfo) error {
	data, err := os.ReadFile(p.path)
	if err != nil {
		return fmt.Errorf("reading pod map: %w", err)
	}
	entries, err := parsePodMap(data)
	if err != nil {
		return fmt.Errorf("loading pod map %s: %w", p.path, err)
	}
	static, _ := NewStatic(entries) // parsePodMap validated entries
	p.static = static
	p.modTime, p.size = fi.ModTime(), fi.Size()
	p.log.Debug().Int("entries", len(entries)).Msg("pod map loaded")
	return nil
}

// reloadIfChanged reloads the file when its stat changed. A failed reload is
// logged once per change and the previous map stays.
func (p *podMapFile) reloadIfChanged() {
	fi, err := os.Stat(p.path)
	if err != nil {
		return
	}
	p.mu.RLock()
	same := fi.ModTime().Equal(p.modTime) && fi.Size() == p.size
	p.mu.RUnlock()
	if same {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if fi.ModTime().Equal(p.modTime) && fi.Size() == p.size {
		return
	}
	if err := p.load(fi); err != nil {
		p.modTime, p.size = fi.ModTime(), fi.Size()
		p.log.Warn().Err(err).Msg("pod map changed but cannot be loaded; keeping the previous map")
	}
}

func (p *podMapFile) Resolve(ctx context.Context, containerID, podUID string) (Info, bool, error) {
	p.reloadIfChanged()
	p.mu.RLock()
	s := p.static
	p.mu.RUnlock()
	return s.Resolve(ctx, containerID, podUID)
}
