package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"github.com/edgerelay/edgerelay/model"
	"time"
)

// Workflows are kept as templates are: one row per version,
// numbered by the primary key (tenant, type, version). A put reads the
// latest version and inserts the next number ON CONFLICT DO NOTHING: on
// SQLite the writer's lock means the number is always free; on PostgreSQL
// another node may take it between the read and the insert, and then the
// insert writes nothing and the put starts again (Methods.PutWorkflow).

// errVersionTaken: another writer inserted the version number a put read
// as next.
var errVersionTaken = errors.New("workflow version taken")

const workflowCols = `version, definition, created_at, retired_at`

func scanWorkflow(r Row, tenant, typ string) (model.StoredWorkflow, error) {
	w := model.StoredWorkflow{Tenant: tenant, Type: typ}
	var def string
	var created int64
	var retired *int64
	if err := r.Scan(&w.Version, &def, &created, &retired); err != nil {
		return w, err
	}
	w.Definition, w.CreatedAt, w.RetiredAt = []byte(def), FromMS(created), FromMSPtr(retired)
	return w, nil
}

// PutWorkflow stores def as the next version of tenant's workflow for typ,
// in q, a write transaction, unless it equals the latest version and that
// one is not retired: then it returns that version and created false (a
// PUT repeated after a lost answer makes no second version).
// errVersionTaken: another writer took the next number; start again.
func PutWorkflow(ctx context.Context, q Querier, tenant, typ string, def []byte, now time.Time) (w model.StoredWorkflow, created bool, err error) {
	latest, err := WorkflowVersion(ctx, q, tenant, typ, 0)
	switch {
	case errors.Is(err, model.ErrNotFound):
	case err != nil:
		return w, false, err
	case latest.RetiredAt == nil && string(latest.Definition) == string(def):
		return latest, false, nil
	}
	w, err = scanWorkflow(q.QueryRow(ctx, `INSERT INTO workflows (tenant, type, version, definition, created_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING `+workflowCols,
		tenant, typ, latest.Version+1, string(def), MS(now)), tenant, typ)
	if IsNoRows(err) {
		return w, false, errVersionTaken
	}
	if err != nil {
		return w, false, fmt.Errorf("put workflow %s: %w", typ, err)
	}
	return w, true, nil
}

// WorkflowVersion reads one version of tenant's workflow for typ, the
// latest for version 0 (retired or not). ErrNotFound if there is none.
func WorkflowVersion(ctx context.Context, q Querier, tenant, typ string, version int) (model.StoredWorkflow, error) {
	w, err := scanWorkflow(q.QueryRow(ctx, `SELECT `+workflowCols+` FROM workflows
		WHERE tenant = $1 AND type = $2 AND ($3 = 0 OR version = $3) ORDER BY version DESC LIMIT 1`,
		tenant, typ, version), tenant, typ)
	if IsNoRows(err) {
		return model.StoredWorkflow{}, fmt.Errorf("workflow %s version %d: %w", typ, version, model.ErrNotFound)
	}
	if err != nil {
		return model.StoredWorkflow{}, fmt.Errorf("read workflow %s: %w", typ, err)
	}
	return w, nil
}

// WorkflowVersions lists every version of tenant's workflow for typ,
// oldest first; none is an empty list.
func WorkflowVersions(ctx context.Context, q Querier, tenant, typ string) ([]model.StoredWorkflow, error) {
	rows, err := q.Query(ctx, `SELECT `+workflowCols+` FROM workflows WHERE tenant = $1 AND type = $2 ORDER BY version`, tenant, typ)
	if err != nil {
		return nil, fmt.Errorf("workflow versions of %s: %w", typ, err)
	}
	defer rows.Close()
	out := []model.StoredWorkflow{}
	for rows.Next() {
		w, err := scanWorkflow(rows, tenant, typ)
		if err != nil {
			return nil, fmt.Errorf("workflow versions of %s: %w", typ, err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// RetireWorkflow marks the latest version of tenant's workflow for typ
// retired at now, in q, a write transaction, and returns it. ErrNotFound
// if there is no version or the latest is retired already.
func RetireWorkflow(ctx context.Context, q Querier, tenant, typ string, now time.Time) (model.StoredWorkflow, error) {
	w, err := scanWorkflow(q.QueryRow(ctx, `UPDATE workflows SET retired_at = $3
		WHERE tenant = $1 AND type = $2 AND retired_at IS NULL
			AND version = (SELECT max(version) FROM workflows WHERE tenant = $1 AND type = $2)
		RETURNING `+workflowCols, tenant, typ, MS(now)), tenant, typ)
	if IsNoRows(err) {
		return model.StoredWorkflow{}, fmt.Errorf("live workflow %s: %w", typ, model.ErrNotFound)
	}
	if err != nil {
		return model.StoredWorkflow{}, fmt.Errorf("retire workflow %s: %w", typ, err)
	}
	return w, nil
}
