//! The host pool's events (assisted-service's `events` table): rows written in the transaction of the
//! record change they describe, so no reader sees one without the other, and read back a page at a
//! time. The pool decides what is recorded and how many are kept (`pool/events.rs`); this module
//! only stores, bounds and selects them.
//!
//! Every write and every read goes through an index: a write inserts its rows and deletes what falls
//! past its scope's bound (the newest `keep` of a host, or of a cluster's own events), so a write
//! costs the same however long the history is; a read filters on the scope it is allowed to see.

use rusqlite::{OptionalExtension, params, params_from_iter};

use super::{SqliteStore, backend};
use crate::store::StoreError;

/// The table and its indexes, created with the rest of the schema. `seq` orders events as they
/// were committed, which is the order of the changes they describe.
pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    cluster_id TEXT NOT NULL,
    host_id TEXT NOT NULL,
    infra_env_id TEXT NOT NULL,
    severity TEXT NOT NULL,
    category TEXT NOT NULL,
    message TEXT NOT NULL,
    event_time TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_host ON events (infra_env_id, host_id, seq);
CREATE INDEX IF NOT EXISTS events_by_cluster ON events (cluster_id, host_id, seq);
";

/// One event as stored; an empty id is "none" (a cluster's own event has no host).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventRow {
    pub name: String,
    pub cluster_id: String,
    pub host_id: String,
    pub infra_env_id: String,
    pub severity: String,
    pub category: String,
    pub message: String,
    pub event_time: String,
}

/// What one write keeps of a scope: the newest `keep` events of the host (`infra_env_id`,
/// `host_id`), or, for a row without a host, of the cluster's own events.
#[derive(Clone, Copy, Debug)]
pub struct Keep(pub u32);

/// Which events a read selects: every filter narrows (an AND of them); `host_ids` and
/// `cluster_level` together select those hosts' events or the cluster's own (assisted's
/// disjunction), either alone only that.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventQuery {
    pub infra_env_id: Option<String>,
    pub cluster_id: Option<String>,
    pub host_ids: Option<Vec<String>>,
    pub cluster_level: bool,
    pub severities: Option<Vec<String>>,
    pub categories: Option<Vec<String>>,
    /// A case-insensitive substring of the message.
    pub message: Option<String>,
    pub descending: bool,
    pub limit: u32,
    pub offset: u32,
}

/// A page of events, with the counts assisted's headers carry: by severity over every page (before
/// the severity filter), and how many every page holds (after it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventPage {
    pub events: Vec<EventRow>,
    pub by_severity: Vec<(String, u64)>,
    pub count: u64,
}

fn insert_events(conn: &rusqlite::Connection, rows: &[EventRow], keep: Keep) -> Result<(), StoreError> {
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO events (name, cluster_id, host_id, infra_env_id, severity, category, message, event_time)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .map_err(backend)?;
    for r in rows {
        insert
            .execute(params![
                r.name,
                r.cluster_id,
                r.host_id,
                r.infra_env_id,
                r.severity,
                r.category,
                r.message,
                r.event_time
            ])
            .map_err(backend)?;
    }
    // The bound, through the scope's index: the seq of its keep-th newest event, and what is older.
    for r in rows {
        let (scope_sql, delete_sql, a, b) = if r.host_id.is_empty() {
            (
                "SELECT seq FROM events WHERE cluster_id=?1 AND host_id=?2 ORDER BY seq DESC LIMIT 1 OFFSET ?3",
                "DELETE FROM events WHERE cluster_id=?1 AND host_id=?2 AND seq<?3",
                &r.cluster_id,
                &r.host_id,
            )
        } else {
            (
                "SELECT seq FROM events WHERE infra_env_id=?1 AND host_id=?2 ORDER BY seq DESC LIMIT 1 OFFSET ?3",
                "DELETE FROM events WHERE infra_env_id=?1 AND host_id=?2 AND seq<?3",
                &r.infra_env_id,
                &r.host_id,
            )
        };
        let oldest_kept: Option<i64> = conn
            .prepare_cached(scope_sql)
            .and_then(|mut s| s.query_row(params![a, b, keep.0.saturating_sub(1)], |row| row.get(0)).optional())
            .map_err(backend)?;
        if let Some(seq) = oldest_kept {
            conn.prepare_cached(delete_sql).and_then(|mut s| s.execute(params![a, b, seq])).map_err(backend)?;
        }
    }
    Ok(())
}

/// `%`, `_` and the escape itself taken literally in a LIKE pattern.
fn like_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    for c in s.to_lowercase().chars() {
        if matches!(c, '\\' | '%' | '_') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The WHERE clause of `q` without its severity filter, and its parameters.
fn conditions(q: &EventQuery) -> (Vec<String>, Vec<String>) {
    let mut sql = vec!["1".to_string()];
    let mut args = Vec::new();
    let mut push = |clause: String, values: &mut dyn Iterator<Item = String>| {
        sql.push(clause);
        args.extend(values);
    };
    if let Some(id) = &q.infra_env_id {
        push("infra_env_id=?".into(), &mut std::iter::once(id.clone()));
    }
    if let Some(id) = &q.cluster_id {
        push("cluster_id=?".into(), &mut std::iter::once(id.clone()));
    }
    if q.host_ids.is_some() || q.cluster_level {
        let hosts = q.host_ids.as_deref().unwrap_or_default();
        let mut any = Vec::new();
        if !hosts.is_empty() {
            any.push(format!("host_id IN ({})", vec!["?"; hosts.len()].join(",")));
        }
        if q.cluster_level {
            any.push("host_id=''".into());
        }
        if any.is_empty() {
            any.push("0".into());
        }
        push(format!("({})", any.join(" OR ")), &mut hosts.iter().cloned());
    }
    if let Some(categories) = &q.categories {
        let marks = vec!["?"; categories.len().max(1)].join(",");
        let values: Vec<String> = if categories.is_empty() { vec![String::new()] } else { categories.clone() };
        push(format!("category IN ({marks})"), &mut values.into_iter());
    }
    if let Some(m) = &q.message {
        push("LOWER(message) LIKE ? ESCAPE '\\'".into(), &mut std::iter::once(format!("%{}%", like_literal(m))));
    }
    (sql, args)
}

fn query_events(conn: &rusqlite::Connection, q: &EventQuery) -> Result<EventPage, StoreError> {
    let (mut sql, mut args) = conditions(q);
    let mut by_severity: Vec<(String, u64)> = Vec::new();
    {
        let text = format!("SELECT severity, COUNT(*) FROM events WHERE {} GROUP BY severity", sql.join(" AND "));
        let mut stmt = conn.prepare(&text).map_err(backend)?;
        let rows = stmt
            .query_map(params_from_iter(args.iter()), |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(backend)?;
        for row in rows {
            let (severity, n) = row.map_err(backend)?;
            by_severity.push((severity, n.max(0) as u64));
        }
    }
    let count = by_severity
        .iter()
        .filter(|(s, _)| q.severities.as_ref().is_none_or(|wanted| wanted.contains(s)))
        .map(|(_, n)| n)
        .sum();
    if let Some(severities) = &q.severities {
        if severities.is_empty() {
            return Ok(EventPage { events: Vec::new(), by_severity, count });
        }
        sql.push(format!("severity IN ({})", vec!["?"; severities.len()].join(",")));
        args.extend(severities.iter().cloned());
    }
    let text = format!(
        "SELECT name, cluster_id, host_id, infra_env_id, severity, category, message, event_time FROM events
         WHERE {} ORDER BY seq {} LIMIT {} OFFSET {}",
        sql.join(" AND "),
        if q.descending { "DESC" } else { "ASC" },
        q.limit,
        q.offset
    );
    let mut stmt = conn.prepare(&text).map_err(backend)?;
    let events = stmt
        .query_map(params_from_iter(args.iter()), |r| {
            Ok(EventRow {
                name: r.get(0)?,
                cluster_id: r.get(1)?,
                host_id: r.get(2)?,
                infra_env_id: r.get(3)?,
                severity: r.get(4)?,
                category: r.get(5)?,
                message: r.get(6)?,
                event_time: r.get(7)?,
            })
        })
        .map_err(backend)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(backend)?;
    Ok(EventPage { events, by_severity, count })
}

impl SqliteStore {
    /// Writes a record and the events of its change in one transaction, each event's scope then
    /// bounded to `keep`.
    pub async fn put_record_with_events(
        &self,
        collection: &'static str,
        id: String,
        body: String,
        events: Vec<EventRow>,
        keep: Keep,
    ) -> Result<(), StoreError> {
        self.write(move |conn, _| {
            conn.prepare_cached(
                "INSERT INTO records (collection, id, body) VALUES (?1, ?2, ?3)
                 ON CONFLICT (collection, id) DO UPDATE SET body=excluded.body",
            )
            .and_then(|mut s| s.execute(params![collection, id, body]))
            .map_err(backend)?;
            insert_events(conn, &events, keep)
        })
        .await
    }

    /// Deletes a host's record and its events in one transaction.
    pub async fn delete_host_record(
        &self,
        collection: &'static str,
        id: String,
        infra_env_id: String,
        host_id: String,
    ) -> Result<(), StoreError> {
        self.write(move |conn, _| {
            conn.prepare_cached("DELETE FROM records WHERE collection=?1 AND id=?2")
                .and_then(|mut s| s.execute(params![collection, id]))
                .map_err(backend)?;
            conn.prepare_cached("DELETE FROM events WHERE infra_env_id=?1 AND host_id=?2")
                .and_then(|mut s| s.execute(params![infra_env_id, host_id]))
                .map_err(backend)?;
            Ok(())
        })
        .await
    }

    /// Deletes a cluster's record and its own events (not its hosts': they stay with the hosts,
    /// which outlive it) in one transaction.
    pub async fn delete_cluster_record(&self, collection: &'static str, cluster_id: String) -> Result<(), StoreError> {
        self.write(move |conn, _| {
            conn.prepare_cached("DELETE FROM records WHERE collection=?1 AND id=?2")
                .and_then(|mut s| s.execute(params![collection, cluster_id]))
                .map_err(backend)?;
            conn.prepare_cached("DELETE FROM events WHERE cluster_id=?1 AND host_id=''")
                .and_then(|mut s| s.execute(params![cluster_id]))
                .map_err(backend)?;
            Ok(())
        })
        .await
    }

    /// A page of the events `q` selects. Run by the writer thread, as the pool's other reads of
    /// SQLite: its cost is bounded by the caller's page and by what a scope keeps.
    pub async fn select_events(&self, q: EventQuery) -> Result<EventPage, StoreError> {
        self.write(move |conn, _| query_events(conn, &q)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_event(ie: &str, host: &str, cluster: &str, n: usize) -> EventRow {
        EventRow {
            name: "host_status_updated".into(),
            cluster_id: cluster.into(),
            host_id: host.into(),
            infra_env_id: ie.into(),
            severity: if n % 3 == 0 { "warning" } else { "info" }.into(),
            category: "user".into(),
            message: format!("event {n}"),
            event_time: format!("2025-01-01T00:00:{:02}Z", n % 60),
        }
    }

    fn messages(page: &EventPage) -> Vec<String> {
        page.events.iter().map(|e| e.message.clone()).collect()
    }

    #[tokio::test]
    async fn each_scope_keeps_its_newest_events_and_a_read_sees_only_what_it_selects() {
        let db = SqliteStore::open_in_memory().unwrap();
        for n in 0..10 {
            let rows = vec![host_event("ie-a", "h1", "", n)];
            db.put_record_with_events("hosts", "ie-a/h1".into(), "{}".into(), rows, Keep(4)).await.unwrap();
        }
        // Another tenant's host of the same id, and a cluster's own events.
        db.put_record_with_events(
            "hosts",
            "ie-b/h1".into(),
            "{}".into(),
            vec![host_event("ie-b", "h1", "c1", 0)],
            Keep(4),
        )
        .await
        .unwrap();
        for n in 0..6 {
            db.put_record_with_events("clusters", "c1".into(), "{}".into(), vec![host_event("", "", "c1", n)], Keep(3))
                .await
                .unwrap();
        }
        let all = |q: EventQuery| EventQuery { limit: 100, ..q };
        let a = db
            .select_events(all(EventQuery { infra_env_id: Some("ie-a".into()), ..Default::default() }))
            .await
            .unwrap();
        assert_eq!(messages(&a), ["event 6", "event 7", "event 8", "event 9"]);
        assert_eq!(a.count, 4);
        assert_eq!(a.by_severity, [("info".to_string(), 2), ("warning".to_string(), 2)]);
        let c1 =
            db.select_events(all(EventQuery { cluster_id: Some("c1".into()), ..Default::default() })).await.unwrap();
        assert_eq!(
            messages(&c1),
            ["event 0", "event 3", "event 4", "event 5"],
            "ie-b's host event, then c1's newest 3"
        );
        let own = EventQuery { cluster_id: Some("c1".into()), cluster_level: true, ..Default::default() };
        assert_eq!(db.select_events(all(own)).await.unwrap().events.len(), 3);

        // Order, pages, severities, message.
        let page = db
            .select_events(EventQuery {
                infra_env_id: Some("ie-a".into()),
                descending: true,
                limit: 2,
                offset: 1,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(messages(&page), ["event 8", "event 7"]);
        assert_eq!(page.count, 4, "the count is of every page");
        let warnings = EventQuery {
            infra_env_id: Some("ie-a".into()),
            severities: Some(vec!["warning".into()]),
            ..Default::default()
        };
        let w = db.select_events(all(warnings)).await.unwrap();
        assert_eq!((messages(&w), w.count), (vec!["event 6".to_string(), "event 9".to_string()], 2));
        assert_eq!(w.by_severity.len(), 2, "counted before the severity filter");
        let like = EventQuery { infra_env_id: Some("ie-a".into()), message: Some("T 7".into()), ..Default::default() };
        assert_eq!(messages(&db.select_events(all(like)).await.unwrap()), ["event 7"]);
        let wildcard =
            EventQuery { infra_env_id: Some("ie-a".into()), message: Some("%".into()), ..Default::default() };
        assert!(db.select_events(all(wildcard)).await.unwrap().events.is_empty(), "% is taken literally");

        // A host's events go with its record; a cluster's own with its record.
        db.delete_host_record("hosts", "ie-a/h1".into(), "ie-a".into(), "h1".into()).await.unwrap();
        let a = db
            .select_events(all(EventQuery { infra_env_id: Some("ie-a".into()), ..Default::default() }))
            .await
            .unwrap();
        assert!(a.events.is_empty());
        db.delete_cluster_record("clusters", "c1".into()).await.unwrap();
        let c1 =
            db.select_events(all(EventQuery { cluster_id: Some("c1".into()), ..Default::default() })).await.unwrap();
        assert_eq!(messages(&c1), ["event 0"], "ie-b's host keeps its history");
        assert!(db.list_records("hosts").await.unwrap().iter().all(|(k, _)| k != "ie-a/h1"));
    }

    /// The bound is kept through the scope's index: the plan of every statement a write runs
    /// searches an index, never scans the table.
    #[test]
    fn writes_and_reads_use_an_index() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        let plan = |sql: &str| -> String {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let rows = stmt.query_map([], |r| r.get::<_, String>(3)).unwrap();
            rows.map(|r| r.unwrap()).collect::<Vec<_>>().join("; ")
        };
        for sql in [
            "SELECT seq FROM events WHERE infra_env_id='a' AND host_id='h' ORDER BY seq DESC LIMIT 1 OFFSET 5",
            "DELETE FROM events WHERE infra_env_id='a' AND host_id='h' AND seq<9",
            "SELECT seq FROM events WHERE cluster_id='c' AND host_id='' ORDER BY seq DESC LIMIT 1 OFFSET 5",
            "DELETE FROM events WHERE cluster_id='c' AND host_id='' AND seq<9",
            "SELECT * FROM events WHERE 1 AND infra_env_id='a' ORDER BY seq LIMIT 5",
            "SELECT * FROM events WHERE 1 AND cluster_id='c' ORDER BY seq LIMIT 5",
        ] {
            let p = plan(sql);
            assert!(p.contains("USING") && p.contains("INDEX"), "{sql}: {p}");
        }
    }
}
