package authn

import "github.com/rs/zerolog"

// Files opens each token file once under the agent's policy (Default: 16
// characters at least, not group- or world-writable, reloaded when
// rotated), so the API and the audit webhooks that name the same file
// share one source and see a rotation together.
type Files struct {
	log   zerolog.Logger
	files map[string]*File
}

// NewFiles returns an empty set of shared token files.
func NewFiles(log zerolog.Logger) *Files {
	return &Files{log: log, files: map[string]*File{}}
}

// Open returns the shared source for path.
func (t *Files) Open(path string) (*File, error) {
	if f, ok := t.files[path]; ok {
		return f, nil
	}
	f, err := Open(path, Default(), t.log)
	if err != nil {
		return nil, err
	}
	t.files[path] = f
	return f, nil
}
