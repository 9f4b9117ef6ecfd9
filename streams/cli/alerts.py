"""``traintrace alerts``: the referee's alerts forwarded to an Alertmanager (issue 26)."""

from __future__ import annotations

import click

from streams.cli.common import err_console, kafka_options, kafka_settings, operator_errors, topic_prefix_option, topics_for


@click.command()
@click.option("--alertmanager", "url", required=True, envvar="TRAINTRACE_ALERTMANAGER_URL", metavar="URL",
              help="Alertmanager's base URL (its v2 API: POST URL/api/v2/alerts). [env TRAINTRACE_ALERTMANAGER_URL]")
@click.option("--page-url", envvar="TRAINTRACE_PAGE_URL", default=None, metavar="URL",
              help="The live page (traintrace ui) to link from each alert. [env TRAINTRACE_PAGE_URL]")
@click.option("--resend", "resend_s", type=click.FloatRange(min=1), default=60.0, show_default=True,
              metavar="SECONDS", help="Post every active alert again this often (below Alertmanager's "
                                      "resolve_timeout, 5 min by default).")
@click.option("--once", is_flag=True, help="Read the topics to their end, post everything, exit (cron, tests).")
@kafka_options(start_broker=False)
@topic_prefix_option
def alerts(url: str, page_url: str | None, resend_s: float, once: bool, bootstrap: str | None,
           kafka_config: str | None, topic_prefix: str | None) -> None:
    """Forward the referee's alerts (lineage.alerts) to an Alertmanager, labelled for its routing
    tree (alertname, kind, severity, cohort, job, incident) and annotated with what to do
    (summary, description, action, the live page's url). An incident's page resolves when every
    plan it made has ended (the jobs rolled back past it); a halt's when it is released; other
    kinds are one-off (they end after an hour). Restartable: the labels never change, so nothing
    pages twice. Runs until interrupted; --once reads to the end and exits."""
    from streams.alerting.forwarder import Forwarder, http_post

    kafka = kafka_settings(bootstrap, kafka_config)
    topics = topics_for(topic_prefix)
    fw = Forwarder(kafka, topics, http_post(url), page_url=page_url, resend_s=resend_s)
    with operator_errors():
        if once:
            n = fw.once()
            if fw.failures:
                raise click.ClickException(f"Alertmanager at {url} did not accept the alerts (see the log)")
            click.echo(f"{n} alert(s) posted to {url}")
            return
        err_console.print(f"traintrace alerts: {topics.alerts} -> {url} (Ctrl-C to stop)", highlight=False)
        try:
            fw.run()
        except KeyboardInterrupt:
            pass
