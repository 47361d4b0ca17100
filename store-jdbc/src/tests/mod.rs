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
