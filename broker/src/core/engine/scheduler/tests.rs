//! The schedule's parsing and the jobs' plans and stored state.

use super::*;

fn message(properties: &[(&str, PropertyValue)]) -> Message {
    let mut message = Message::new(MessageId(7), "ID:c:1:1:7", Destination::queue("Q"));
    for (name, value) in properties {
        message.properties.insert((*name).into(), value.clone());
    }
    message
}

fn text(value: &str) -> PropertyValue {
    PropertyValue::String(value.into())
}

fn schedule(properties: &[(&str, PropertyValue)]) -> Result<Option<Schedule>, String> {
    Schedule::of(&message(properties))
}

#[test]
fn properties_as_numbers_or_numeric_strings() {
    let typed = schedule(&[
        (AMQ_SCHEDULED_DELAY, PropertyValue::Long(500)),
        (AMQ_SCHEDULED_PERIOD, PropertyValue::Int(100)),
        (AMQ_SCHEDULED_REPEAT, PropertyValue::Int(3)),
    ]);
    let strings = schedule(&[
        (AMQ_SCHEDULED_DELAY, text("500")),
        (AMQ_SCHEDULED_PERIOD, text(" 100")),
        (AMQ_SCHEDULED_REPEAT, text("3")),
    ]);
    let expected = Schedule { delay: 500, period: 100, repeat: 3, cron: None };
    assert_eq!(typed, Ok(Some(expected.clone())));
    assert_eq!(strings, Ok(Some(expected)));
}

#[test]
fn no_schedule_without_delay_period_or_cron_or_once_delivered() {
    assert_eq!(schedule(&[]), Ok(None));
    assert_eq!(schedule(&[(AMQ_SCHEDULED_REPEAT, PropertyValue::Int(3))]), Ok(None));
    let fired = [(AMQ_SCHEDULED_DELAY, PropertyValue::Long(5)), (AMQ_SCHEDULED_ID, text("x"))];
    assert_eq!(schedule(&fired), Ok(None));
}

#[test]
fn invalid_values_are_refused_naming_the_property() {
    let cases: [(&[(&str, PropertyValue)], &str); 6] = [
        (
            &[(AMQ_SCHEDULED_DELAY, PropertyValue::Long(-1))],
            "AMQ_SCHEDULED_DELAY must not be negative",
        ),
        (&[(AMQ_SCHEDULED_PERIOD, text("-5"))], "AMQ_SCHEDULED_PERIOD must not be negative"),
        (
            &[(AMQ_SCHEDULED_DELAY, text("soon"))],
            "AMQ_SCHEDULED_DELAY must be a whole number, not `soon`",
        ),
        (&[(AMQ_SCHEDULED_CRON, text("61 * * * *"))], "invalid cron entry `61 * * * *`"),
        (
            &[(AMQ_SCHEDULED_DELAY, text("1")), (AMQ_SCHEDULED_REPEAT, text("99999999999"))],
            "AMQ_SCHEDULED_REPEAT must be an int",
        ),
        (
            &[(AMQ_SCHEDULED_DELAY, text("1")), (AMQ_SCHEDULED_REPEAT, text("-1"))],
            "repeats forever and needs a positive AMQ_SCHEDULED_PERIOD",
        ),
    ];
    for (properties, expected) in cases {
        let error = schedule(properties).expect_err(expected);
        assert!(error.contains(expected), "{error}");
    }
}

fn job(properties: &[(&str, PropertyValue)], now: i64) -> Job {
    let message = message(properties);
    let schedule = Schedule::of(&message).expect("valid").expect("scheduled");
    Job::new(&message, schedule, now)
}

#[test]
fn delay_then_period_repeat_times() {
    let now = 1_000_000;
    let mut job = job(
        &[
            (AMQ_SCHEDULED_DELAY, PropertyValue::Long(500)),
            (AMQ_SCHEDULED_PERIOD, PropertyValue::Long(100)),
            (AMQ_SCHEDULED_REPEAT, PropertyValue::Int(2)),
        ],
        now,
    );
    assert_eq!(job.due, now + 500);
    let mut fires = Vec::new();
    loop {
        let plan = job.plan(job.due);
        assert!(plan.deliver);
        fires.push(job.due);
        let Some((due, remaining)) = plan.next else { break };
        job = Job { due, remaining, ..job };
    }
    assert_eq!(fires, [now + 500, now + 600, now + 700]);
}

#[test]
fn period_without_delay_waits_one_period_first() {
    let job = job(&[(AMQ_SCHEDULED_PERIOD, PropertyValue::Long(250))], 0);
    assert_eq!(job.due, 250);
    assert_eq!(job.plan(250), FirePlan { deliver: true, next: None, start_sequence: None });
}

#[test]
fn cron_jobs_deliver_at_each_time_or_start_sequences() {
    // 1970-01-01 00:00:30 UTC; the entry fires at every minute 0 of an hour.
    let now = 30_000;
    let plain = job(&[(AMQ_SCHEDULED_CRON, text("0 * * * *"))], now);
    assert_eq!(plain.due, 3_600_000);
    let plan = plain.plan(3_600_000);
    assert_eq!(plan, FirePlan { deliver: true, next: Some((7_200_000, 0)), start_sequence: None });

    let repeating = job(
        &[
            (AMQ_SCHEDULED_CRON, text("0 * * * *")),
            (AMQ_SCHEDULED_DELAY, text("1000")),
            (AMQ_SCHEDULED_PERIOD, text("1000")),
            (AMQ_SCHEDULED_REPEAT, text("9")),
        ],
        now,
    );
    assert_eq!(repeating.due, 3_601_000);
    let plan = repeating.plan(3_601_000);
    assert!(!plan.deliver);
    assert_eq!(plan.start_sequence, Some((3_602_000, 9)));
    assert_eq!(plan.next, Some((7_200_000, 9)));
    let sequence = Job { due: 3_602_000, remaining: 9, sequence: true, ..repeating };
    let plan = sequence.plan(3_602_000);
    assert_eq!(plan, FirePlan { deliver: true, next: Some((3_603_000, 8)), start_sequence: None });
}

#[test]
fn delivered_copies_lose_the_schedule_and_repeats_get_new_ids() {
    let once = job(&[(AMQ_SCHEDULED_DELAY, PropertyValue::Long(5))], 0);
    let copy = delivered(&once, MessageId(20), 5);
    assert_eq!(&*copy.message_id, "ID:c:1:1:7");
    assert_eq!(copy.id, MessageId(20));
    assert_eq!(copy.properties.len(), 1, "{:?}", copy.properties);
    assert_eq!(copy.properties.get(AMQ_SCHEDULED_ID), Some(&text("ID:c:1:1:7")));

    let repeated = job(
        &[(AMQ_SCHEDULED_PERIOD, PropertyValue::Long(5)), (AMQ_SCHEDULED_REPEAT, text("1"))],
        0,
    );
    let copy = delivered(&repeated, MessageId(21), 5);
    assert_eq!(&*copy.message_id, "ID:ferromq-scheduler:1:1:21");
    assert!(Schedule::of(&copy).expect("valid").is_none());
}

#[test]
fn a_time_to_live_counts_from_the_delivery() {
    let mut message = message(&[(AMQ_SCHEDULED_DELAY, PropertyValue::Long(5000))]);
    message.headers.timestamp = 1000;
    message.headers.expiration = 3000;
    let schedule = Schedule::of(&message).expect("valid").expect("scheduled");
    let job = Job::new(&message, schedule, 1000);
    let copy = delivered(&job, MessageId(9), 6000);
    assert_eq!((copy.headers.timestamp, copy.headers.expiration), (6000, 8000));
}

#[test]
fn stored_state_round_trips() {
    let original = job(
        &[(AMQ_SCHEDULED_PERIOD, PropertyValue::Long(5)), (AMQ_SCHEDULED_REPEAT, text("4"))],
        100,
    );
    let entry = Arc::new(entry_of(&original.entry, MessageId(30), 777, 2, true));
    let back = Job::recovered(entry).expect("recovers");
    assert_eq!((back.due, back.remaining, back.sequence), (777, 2, true));
    assert_eq!(back.schedule, original.schedule);
}
