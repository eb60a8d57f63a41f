//! The leader loop every user of an election writes: campaign, run the job while leading,
//! stop it the moment the lead is lost and campaign again, resign once the job is done.

use std::future::Future;

use super::Election;
use crate::error::Error;
use crate::token::FencingToken;

impl Election {
    /// Runs `job` while this process leads: campaigns, calls `job` with the term (pass it with
    /// every write the job makes, see [`Leadership::term`](super::Leadership::term)) and runs
    /// the job's future until it finishes, then resigns and returns its output. When the lead
    /// is lost first, the job's future is dropped at its current `.await` (as a locked fn's
    /// body is), and the campaign starts again: the next win calls `job` anew, with a greater
    /// term. What Kubernetes' leader election calls `OnStartedLeading`, as one call.
    ///
    /// Returns:
    /// - `Ok(output)` once the job finished while this process still led;
    /// - [`Error::LeaseLost`] when the job finished but the lead had been lost by then (it may
    ///   have run in part after another leader took over, as a locked fn's body returning `Ok`
    ///   after its lease ended);
    /// - [`Error::ShutDown`] once the client is [shut down](crate::Client::shutdown), while
    ///   campaigning or leading (shutting down takes the lead back, which drops the job): the
    ///   end of a service's leader loop;
    /// - the campaign's other errors, as [`campaign`](Self::campaign) returns them (a
    ///   [`wait`](Self::wait) that ran out, a setting that cannot work).
    ///
    /// ```no_run
    /// # async fn demo(client: distlock::Client) -> Result<(), distlock::Error> {
    /// # async fn schedule_reports(term: distlock::FencingToken) {}
    /// use std::time::Duration;
    ///
    /// let election = client.election("report-scheduler").ttl(Duration::from_secs(10));
    /// // Every instance runs this; one schedules at a time, until the service shuts down.
    /// match election.lead(|term| schedule_reports(term)).await {
    ///     Ok(()) | Err(distlock::Error::ShutDown { .. }) => Ok(()),
    ///     Err(e) => Err(e),
    /// }
    /// # }
    /// ```
    pub async fn lead<F, Fut>(&self, mut job: F) -> Result<Fut::Output, Error>
    where
        F: FnMut(FencingToken) -> Fut,
        Fut: Future,
    {
        loop {
            let leadership = self.campaign().await?;
            let term = leadership.term();
            let lost = tokio::select! {
                biased;
                lost = leadership.lost() => lost,
                output = job(term) => {
                    if !leadership.is_leader() {
                        return Err(leadership.lost().await);
                    }
                    // A resignation that fails leaves the lock to its lease (or to the
                    // release going on in the background): the job is done either way.
                    if let Err(e) = leadership.resign().await {
                        tracing::debug!(term = term.get(), error = %e, "resigning after the leader's job");
                    }
                    return Ok(output);
                }
            };
            tracing::info!(term = term.get(), error = %lost, "the lead was lost: the job stopped, campaigning again");
        }
    }
}
