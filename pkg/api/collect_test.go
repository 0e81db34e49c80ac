package api

import (
	"context"
	"net/url"
	"slices"
	"testing"
)

// TestCollect: one page, or with all every page through the cursors.
func TestCollect(t *testing.T) {
	pages := map[string]Page[int]{"": {Items: []int{1, 2}, NextCursor: "c1"}, "c1": {Items: []int{3}, NextCursor: "c2"},
		"c2": {Items: []int{4}}}
	fetch := func(_ context.Context, q url.Values) (Page[int], error) { return pages[q.Get("cursor")], nil }
	one, err := Collect(t.Context(), url.Values{}, false, fetch)
	if err != nil || !slices.Equal(one.Items, []int{1, 2}) || one.NextCursor != "c1" {
		t.Errorf("one page: %+v, %v", one, err)
	}
	all, err := Collect(t.Context(), url.Values{}, true, fetch)
	if err != nil || !slices.Equal(all.Items, []int{1, 2, 3, 4}) || all.NextCursor != "" {
		t.Errorf("every page: %+v, %v", all, err)
	}
}
