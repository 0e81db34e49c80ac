package ociimage

// BuildPause is buildPause for the external tests (package ociimage_test),
// which import internal/nodeharness and so cannot live in this package.
func BuildPause(dir, goarch string) (string, error) { return buildPause(dir, goarch) }
