package postgres

// migrations are applied in order; schema_version holds how many ran.
// Times are Unix nanoseconds (as in the SQLite store: exact round trips and
// the same page tokens); ids compare bytewise (COLLATE "C") whatever the
// database's locale, so pages come in the same order everywhere.
var migrations = []string{
	`CREATE TABLE threads (
		id            TEXT COLLATE "C" PRIMARY KEY,
		created_at    BIGINT NOT NULL,
		updated_at    BIGINT NOT NULL,
		metadata      TEXT NOT NULL DEFAULT '{}',
		sandbox_id    TEXT NOT NULL DEFAULT '',
		message_count INTEGER NOT NULL DEFAULT 0,
		state         TEXT NOT NULL DEFAULT '{}',
		interrupt     TEXT
	);
	CREATE INDEX threads_updated ON threads (updated_at DESC, id DESC);
	CREATE TABLE thread_labels (
		thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		key       TEXT NOT NULL,
		value     TEXT NOT NULL,
		PRIMARY KEY (thread_id, key)
	);
	CREATE INDEX thread_labels_kv ON thread_labels (key, value);
	CREATE TABLE messages (
		thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		idx       INTEGER NOT NULL,
		body      TEXT NOT NULL,
		PRIMARY KEY (thread_id, idx)
	);
	CREATE TABLE runs (
		ord       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		run_id    TEXT NOT NULL UNIQUE,
		thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		status    TEXT NOT NULL,
		record    TEXT NOT NULL
	);
	CREATE INDEX runs_thread ON runs (thread_id, ord);
	CREATE INDEX runs_status ON runs (status);
	CREATE TABLE checkpoints (
		id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		thread_id     TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		run_id        TEXT NOT NULL,
		phase         TEXT NOT NULL,
		step          INTEGER NOT NULL,
		message_count INTEGER NOT NULL,
		created_at    BIGINT NOT NULL
	);
	CREATE INDEX checkpoints_thread ON checkpoints (thread_id, id);
	CREATE TABLE thread_files (
		thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		path      TEXT NOT NULL,
		doc       TEXT NOT NULL,
		PRIMARY KEY (thread_id, path)
	);`,
	// Tenancy: rows from before it belong to tenant "default".
	`ALTER TABLE threads ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
	CREATE INDEX threads_tenant ON threads (tenant, updated_at DESC, id DESC);`,
	// Leases of replicated agentd (store.Leases).
	`CREATE TABLE thread_leases (
		thread_id  TEXT COLLATE "C" PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
		holder     TEXT NOT NULL,
		epoch      BIGINT NOT NULL,
		expires_at BIGINT NOT NULL,
		released   BOOLEAN NOT NULL DEFAULT false
	);`,
	// The run event log of replicated agentd (store.RunEvents).
	`CREATE TABLE run_events (
		thread_id TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		run_id    TEXT COLLATE "C" NOT NULL,
		seq       BIGINT NOT NULL,
		start     BOOLEAN NOT NULL,
		terminal  BOOLEAN NOT NULL,
		body      BYTEA NOT NULL,
		PRIMARY KEY (run_id, seq)
	);
	CREATE INDEX run_events_thread ON run_events (thread_id, run_id);`,
	// Cancel requests of replicated agentd (store.Leases.RequestCancel).
	`ALTER TABLE thread_leases ADD COLUMN cancel_requested BOOLEAN NOT NULL DEFAULT false;
	CREATE INDEX thread_leases_cancel ON thread_leases (holder) WHERE cancel_requested;`,
	// Tenants' sealed secrets (store.Secrets; values sealed by pkg/secrets).
	`CREATE TABLE secrets (
		tenant     TEXT COLLATE "C" NOT NULL,
		name       TEXT COLLATE "C" NOT NULL,
		sealed     BYTEA NOT NULL,
		created_at BIGINT NOT NULL,
		updated_at BIGINT NOT NULL,
		PRIMARY KEY (tenant, name)
	);`,
	// Preview URLs (store.Previews).
	`CREATE TABLE previews (
		id         TEXT COLLATE "C" PRIMARY KEY,
		thread_id  TEXT COLLATE "C" NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		tenant     TEXT NOT NULL,
		port       INTEGER NOT NULL,
		created_at BIGINT NOT NULL,
		expires_at BIGINT NOT NULL,
		revoked    BOOLEAN NOT NULL DEFAULT false
	);
	CREATE INDEX previews_thread ON previews (thread_id, expires_at);`,
	// Schedules and their fires (store.Schedules). A fire's tick is
	// unique per schedule: a tick fires at most once, whatever the claim.
	`CREATE TABLE schedules (
		id             TEXT COLLATE "C" PRIMARY KEY,
		tenant         TEXT COLLATE "C" NOT NULL,
		cron           TEXT NOT NULL DEFAULT '',
		time_zone      TEXT NOT NULL DEFAULT '',
		interval_ns    BIGINT NOT NULL DEFAULT 0,
		catch_up       TEXT NOT NULL,
		paused         BOOLEAN NOT NULL DEFAULT false,
		run            TEXT NOT NULL,
		next_fire      BIGINT NOT NULL DEFAULT 0,
		last_fire      BIGINT NOT NULL DEFAULT 0,
		last_run_id    TEXT NOT NULL DEFAULT '',
		last_thread_id TEXT NOT NULL DEFAULT '',
		last_error     TEXT NOT NULL DEFAULT '',
		created_at     BIGINT NOT NULL,
		updated_at     BIGINT NOT NULL
	);
	CREATE INDEX schedules_tenant ON schedules (tenant, created_at DESC, id DESC);
	CREATE INDEX schedules_due ON schedules (next_fire) WHERE NOT paused;
	CREATE TABLE schedule_fires (
		schedule_id TEXT COLLATE "C" NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
		tick        BIGINT NOT NULL,
		fired_at    BIGINT NOT NULL,
		replica     TEXT NOT NULL,
		status      TEXT NOT NULL,
		missed      INTEGER NOT NULL DEFAULT 0,
		run_id      TEXT NOT NULL DEFAULT '',
		thread_id   TEXT NOT NULL DEFAULT '',
		reason      TEXT NOT NULL DEFAULT '',
		PRIMARY KEY (schedule_id, tick)
	);
	CREATE INDEX schedule_fires_pending ON schedule_fires (fired_at) WHERE status = 'pending';`,
	// Tenants' Agent Skills (store.Skills; archive packed by pkg/skills).
	`CREATE TABLE skills (
		tenant      TEXT COLLATE "C" NOT NULL,
		name        TEXT COLLATE "C" NOT NULL,
		description TEXT NOT NULL,
		archive     BYTEA NOT NULL,
		size        BIGINT NOT NULL,
		files       INTEGER NOT NULL,
		sha256      TEXT NOT NULL,
		created_at  BIGINT NOT NULL,
		updated_at  BIGINT NOT NULL,
		PRIMARY KEY (tenant, name)
	);`,
	// Egress asks, decisions and grants (store.EgressRecords); no foreign
	// key: the audit and AGENT grants outlive the thread.
	`CREATE TABLE egress_requests (
		tenant       TEXT NOT NULL,
		thread_id    TEXT COLLATE "C" NOT NULL,
		request_id   TEXT COLLATE "C" NOT NULL,
		agent        TEXT NOT NULL DEFAULT '',
		run_id       TEXT NOT NULL DEFAULT '',
		sandbox_id   TEXT NOT NULL DEFAULT '',
		host         TEXT NOT NULL,
		port         INTEGER NOT NULL,
		tool_call_id TEXT NOT NULL DEFAULT '',
		agent_path   TEXT NOT NULL DEFAULT '',
		created_at   BIGINT NOT NULL,
		status       TEXT NOT NULL,
		scope        TEXT NOT NULL DEFAULT '',
		decided_by   TEXT NOT NULL DEFAULT '',
		decided_at   BIGINT NOT NULL DEFAULT 0,
		reason       TEXT NOT NULL DEFAULT '',
		revoked      BOOLEAN NOT NULL DEFAULT false,
		PRIMARY KEY (thread_id, request_id)
	);
	CREATE INDEX egress_requests_pending ON egress_requests (thread_id, status, created_at);
	CREATE INDEX egress_requests_agent ON egress_requests (tenant, agent, status, decided_at);`,
	// Webhooks (store.Webhooks): tenants' signing keys (sealed by
	// pkg/secrets; expires_at 0 = current) and the delivery log.
	`CREATE TABLE webhook_keys (
		tenant     TEXT COLLATE "C" NOT NULL,
		id         TEXT COLLATE "C" NOT NULL,
		sealed     BYTEA NOT NULL,
		created_at BIGINT NOT NULL,
		expires_at BIGINT NOT NULL DEFAULT 0,
		PRIMARY KEY (tenant, id)
	);
	CREATE TABLE webhook_deliveries (
		id               TEXT COLLATE "C" PRIMARY KEY,
		tenant           TEXT COLLATE "C" NOT NULL,
		thread_id        TEXT NOT NULL,
		run_id           TEXT NOT NULL,
		event            TEXT NOT NULL,
		url              TEXT NOT NULL,
		payload          BYTEA NOT NULL,
		status           TEXT NOT NULL,
		attempts         INTEGER NOT NULL DEFAULT 0,
		last_status_code INTEGER NOT NULL DEFAULT 0,
		last_error       TEXT NOT NULL DEFAULT '',
		next_attempt     BIGINT NOT NULL,
		claim_holder     TEXT NOT NULL DEFAULT '',
		claim_expires    BIGINT NOT NULL DEFAULT 0,
		give_up          BIGINT NOT NULL,
		created_at       BIGINT NOT NULL,
		finished_at      BIGINT NOT NULL DEFAULT 0
	);
	CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt) WHERE status IN ('pending', 'delivering');
	CREATE INDEX webhook_deliveries_tenant ON webhook_deliveries (tenant, created_at DESC, id DESC);`,
	// The usage ledger (store.Ledger): one row per model call, summed by
	// GetUsage and counted by the per-tenant token quotas.
	`CREATE TABLE usage_ledger (
		tenant     TEXT NOT NULL,
		thread_id  TEXT NOT NULL,
		run_id     TEXT NOT NULL,
		model      TEXT NOT NULL DEFAULT '',
		at         BIGINT NOT NULL,
		prompt     BIGINT NOT NULL DEFAULT 0,
		completion BIGINT NOT NULL DEFAULT 0,
		total      BIGINT NOT NULL DEFAULT 0,
		cached     BIGINT NOT NULL DEFAULT 0,
		reasoning  BIGINT NOT NULL DEFAULT 0,
		estimated  INTEGER NOT NULL DEFAULT 0
	);
	CREATE INDEX usage_ledger_tenant_at ON usage_ledger (tenant, at);`,
	// A newer run's request that the thread's run stop at its next
	// checkpoint (store.Leases.RequestStop): '', 'interrupt' or
	// 'rollback'.
	`ALTER TABLE thread_leases ADD COLUMN stop_requested TEXT NOT NULL DEFAULT '';`,
	// Steers (store.Steers): user input sent to a thread's running run,
	// delivered at its next model call by the checkpoint that deletes it.
	`CREATE TABLE run_steers (
		id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		thread_id  TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		run_id     TEXT NOT NULL,
		input      TEXT NOT NULL,
		created_at BIGINT NOT NULL
	);
	CREATE INDEX run_steers_run ON run_steers (thread_id, run_id, id);`,
	// Per-tenant quotas (store.QuotaCounts): when each run was asked for,
	// so that runs_per_minute counts from the shared store.
	`ALTER TABLE runs ADD COLUMN created_at BIGINT NOT NULL DEFAULT 0;
	CREATE INDEX runs_created ON runs (created_at);`,
	// Sandbox lifetimes (store.SandboxLedger): GetUsage's sandbox seconds.
	`CREATE TABLE sandbox_usage (
		sandbox_id TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL,
		thread_id  TEXT NOT NULL,
		started_at BIGINT NOT NULL,
		ended_at   BIGINT NOT NULL DEFAULT 0
	);
	CREATE INDEX sandbox_usage_tenant ON sandbox_usage (tenant, started_at);`,
	// Browser sessions of the HTTP API (store.Sessions): a hash of the
	// session id and the token sealed with a key only the id yields.
	`CREATE TABLE http_sessions (
		id_hash    TEXT PRIMARY KEY,
		sealed     BYTEA NOT NULL,
		created_at BIGINT NOT NULL,
		expires_at BIGINT NOT NULL
	);
	CREATE INDEX http_sessions_expires ON http_sessions (expires_at);`,
	// Workspace snapshots of threads' sandboxes taken at checkpoints
	// (store.ThreadSnapshots), and the snapshots to delete from the
	// workers once no thread names them.
	`CREATE TABLE thread_snapshots (
		thread_id     TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
		snapshot_id   TEXT NOT NULL,
		tenant        TEXT NOT NULL,
		checkpoint_id BIGINT NOT NULL,
		sandbox_id    TEXT NOT NULL,
		created_at    BIGINT NOT NULL,
		PRIMARY KEY (thread_id, snapshot_id)
	);
	CREATE INDEX thread_snapshots_snapshot ON thread_snapshots (snapshot_id);
	CREATE TABLE snapshot_deletions (
		snapshot_id TEXT PRIMARY KEY,
		tenant      TEXT NOT NULL,
		sandbox_id  TEXT NOT NULL,
		queued_at   BIGINT NOT NULL
	);
	CREATE INDEX snapshot_deletions_queued ON snapshot_deletions (queued_at);`,
	// Per-agent retention (agents.<name>.retention.webhook_deliveries):
	// a delivery's agent, the one of its run (from its record, for the
	// deliveries recorded before).
	`ALTER TABLE webhook_deliveries ADD COLUMN agent TEXT NOT NULL DEFAULT '';
	UPDATE webhook_deliveries d SET agent = COALESCE((SELECT r.record::jsonb -> 'spec' ->> 'agent' FROM runs r
		WHERE r.run_id = d.run_id), '');`,
}

// migrateLock is the key of the advisory lock migrations run under.
const migrateLock = 0x706c756d62
