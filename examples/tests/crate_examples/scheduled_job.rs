//! `scheduled_job` as a user runs it, several instances on one real Redis: each period's report
//! runs once, whether the instances' timers fire together or one after another.

use distlock_testkit::RedisServer;

use super::{interrupt, next_line, start};

const RAN: &str = "ran the report";
const SKIPPED: &str = "skipped: another instance has it";

#[tokio::test]
async fn each_period_runs_once_across_instances() {
    let server = RedisServer::start();
    let env = [("REDIS_URL", server.url())];

    // Three instances started together: their first ticks fire at once; one runs the report.
    let mut instances: Vec<_> = (0..3).map(|_| start("scheduled_job", &env)).collect();
    let mut said = Vec::new();
    for (_, out) in &mut instances {
        said.push(next_line(out).await);
    }
    said.sort();
    assert_eq!(said, [RAN, SKIPPED, SKIPPED]);
    for (instance, _) in instances {
        interrupt(instance).await;
    }

    // A fourth, whose timer fires after every other instance has run and exited: without the
    // minimum hold it would find the lock free and run the report again within the period.
    let (late, mut out) = start("scheduled_job", &env);
    assert_eq!(next_line(&mut out).await, SKIPPED);
    interrupt(late).await;
}
