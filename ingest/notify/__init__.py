"""Outgoing notifications: each source's changes sent to its subscriptions, as
signed webhook POSTs or e-mail digests.

A change (``sources.PageVersion``) is routed when it is recorded, in the same
transaction: each active subscription of its source whose filters it passes gets
a waiting row (``SubscriptionChange``), so a crash can lose no change and a
rolled-back step sends none. A periodic job makes each subscription's waiting
changes into one notification once they have settled (no new one for
NOTIFY_QUIET_SECONDS, or the oldest has waited NOTIFY_MAX_WAIT_SECONDS), so a
crawl's burst is one POST or one e-mail; a subscription has at most one
notification unsent at a time, so they arrive in order. A notification's body is
written once and sent as it is on every attempt, with the same id: delivery is at
least once, and the id is what a receiver deduplicates on.
"""
