package store

import (
	"context"
	"time"
)

// Templates are message templates managed over the API (issue 16), kept
// as numbered versions: a change is a new version and every earlier one
// stays readable. Version numbers come from the primary key (tenant, name,
// channel, locale, version): of two writers racing for one number, one
// inserts it and the other takes the next; none is found free by a lookup
// first. Every change also moves one generation number, which every
// process reads cheaply to learn that its in-memory templates are stale.
type Templates interface {
	// PutTemplate stores parts as key's next version, unless they equal
	// its latest version and that one is not retired: then it returns
	// that version and created false (a PUT repeated after a lost answer
	// makes no second version).
	PutTemplate(ctx context.Context, key TemplateKey, parts map[string]string, now time.Time) (t StoredTemplate, created bool, err error)
	// TemplateVersion returns one version of key, the latest for version
	// 0; ErrNotFound if there is none.
	TemplateVersion(ctx context.Context, key TemplateKey, version int) (StoredTemplate, error)
	// TemplateVersions lists key's versions, oldest first; none is an
	// empty list.
	TemplateVersions(ctx context.Context, key TemplateKey) ([]StoredTemplate, error)
	// RetireTemplate marks key's latest version retired at now (new
	// accepts stop using it; every version stays readable) and returns it;
	// ErrNotFound if key has no version or its latest is retired already.
	RetireTemplate(ctx context.Context, key TemplateKey, now time.Time) (StoredTemplate, error)
	// LatestTemplates lists the latest version of every key of tenant (""
	// for every tenant), retired ones included, by tenant, name, channel
	// and locale (bytewise), with the generation it was read at.
	LatestTemplates(ctx context.Context, tenant string) ([]StoredTemplate, int64, error)
	// TemplateChanges is LatestTemplates("") narrowed to the keys changed
	// (a version made, or the latest retired) after generation since: what
	// a reader that loaded at since has not seen, retired ones included,
	// with the generation it was read at. Every change up to that
	// generation is in the list or was read at since.
	TemplateChanges(ctx context.Context, since int64) ([]StoredTemplate, int64, error)
	// TemplateGeneration is a number that every PutTemplate creating a
	// version and every RetireTemplate raises, in the same transaction.
	TemplateGeneration(ctx context.Context) (int64, error)
}

// TemplateKey names a stored template: one tenant's template of one name
// (a notification type or purpose), channel and locale.
type TemplateKey struct {
	Tenant  string `json:"tenant"`
	Name    string `json:"name"`
	Channel string `json:"channel"`
	Locale  string `json:"locale"`
}

// StoredTemplate is one version of a stored template.
type StoredTemplate struct {
	TemplateKey
	Version   int               `json:"version"`
	Parts     map[string]string `json:"parts"`
	CreatedAt time.Time         `json:"created_at"`
	// RetiredAt is set on a latest version that was deleted.
	RetiredAt *time.Time `json:"retired_at,omitempty"`
}
