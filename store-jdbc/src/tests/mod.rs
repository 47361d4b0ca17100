//! The SQL store's own tests: the conformance kit on SQLite and on PostgreSQL, and the
//! failures particular to a database.

mod sqlite_conformance {
    use crate::testing::SqliteHarness;

    store::conformance_tests!(SqliteHarness::new());
}

mod postgres_conformance {
    use crate::testing::PostgresHarness;

    // Without PostgreSQL installed (and not required) each case returns after the loud skip
    // message that `PgCluster` prints.
    store::conformance_tests!(match PostgresHarness::new() {
        Some(harness) => harness,
        None => return,
    });
}

mod counts;
mod crash;
mod failures;
mod lease;

use store::MessageStore;

pub use store::kit::units::{ack_id as ack, add, ids, message, queue, submit, submit_ok};

#[test]
fn sqlite_reads_a_page_as_one_primary_key_range() {
    let harness = crate::testing::SqliteHarness::new();
    let store = crate::SqlStore::open(&harness.url(), harness.dir(), crate::SqlOptions::default())
        .expect("open");
    store.close().expect("close");
    let target = crate::Target::parse(&harness.url(), harness.dir()).expect("url");
    let mut db = crate::db::connect(&target, crate::db::Durability::Full).expect("connect");
    let plan = db
        .query(
            &format!("EXPLAIN QUERY PLAN {}", crate::store::READ_PAGE),
            &[
                crate::db::Param::Int(1),
                crate::db::Param::Int(0),
                crate::db::Param::Int(0),
                crate::db::Param::Int(10),
            ],
        )
        .expect("explain");
    let plan = format!("{plan:?}");
    assert!(
        plan.contains("USING PRIMARY KEY (queue=? AND (priority_rank,msg_id)>(?,?))"),
        "read_page is not one index range: {plan}"
    );
    assert!(!plan.contains("TEMP B-TREE"), "read_page sorts: {plan}");
}
