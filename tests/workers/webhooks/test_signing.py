"""Signatures checked by an independent implementation: the ``standardwebhooks`` package."""

from __future__ import annotations

import base64
import json
import time

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from animfleet.settings import SettingsError
from workers.webhooks.settings import WebhookSettings
from workers.webhooks.signing import InvalidSecret, secret_key, sign

OLD = "whsec_" + base64.b64encode(b"o" * 32).decode()
NEW = "whsec_" + base64.b64encode(b"n" * 24).decode()


def headers(secrets: list[str], body: bytes, msg_id: str = "msg_1") -> dict[str, str]:
    now = int(time.time())
    signature = sign([secret_key(s) for s in secrets], msg_id, now, body)
    return {"webhook-id": msg_id, "webhook-timestamp": str(now), "webhook-signature": signature}


def test_a_signature_verifies_and_a_changed_byte_does_not() -> None:
    body = json.dumps({"type": "job.completed", "data": {"id": "r.1"}}).encode()
    sent = headers([NEW], body)
    assert Webhook(NEW).verify(body, sent)["data"] == {"id": "r.1"}
    for tampered_body, tampered in [
        (body + b" ", sent),
        (body, {**sent, "webhook-id": "msg_2"}),
        (body, {**sent, "webhook-timestamp": str(int(sent["webhook-timestamp"]) + 1)}),
    ]:
        with pytest.raises(WebhookVerificationError):
            Webhook(NEW).verify(tampered_body, tampered)
    with pytest.raises(WebhookVerificationError):
        Webhook(OLD).verify(body, sent)


def test_rotation_signs_with_every_active_secret() -> None:
    body = b'{"type":"job.started","data":{}}'
    sent = headers([NEW, OLD], body)
    assert sent["webhook-signature"].startswith("v1,") and sent["webhook-signature"].count(" ") == 1
    Webhook(NEW).verify(body, sent)
    Webhook(OLD).verify(body, sent)


@pytest.mark.parametrize(
    "secret",
    ["plain", "whsec_not*base64", "whsec_" + base64.b64encode(b"short").decode()],
)
def test_bad_secrets_are_refused_without_echoing_them(secret: str) -> None:
    with pytest.raises(InvalidSecret) as caught:
        secret_key(secret)
    assert secret.removeprefix("whsec_") not in str(caught.value) or secret == "plain"


def test_settings_read_the_environment_and_mask_secrets() -> None:
    settings = WebhookSettings.from_env(
        {"ANIMFLEET_WEBHOOK_SECRETS": f"{NEW}, {OLD}", "ANIMFLEET_WEBHOOK_SCHEDULE_S": "0,1,2"}
    )
    assert settings.schedule_s == (0.0, 1.0, 2.0) and len(settings.keys) == 2
    assert NEW not in repr(settings) and OLD not in str(settings)
    with pytest.raises(SettingsError, match="ANIMFLEET_WEBHOOK_SECRETS is required"):
        WebhookSettings.from_env({})
    with pytest.raises(SettingsError, match="ANIMFLEET_WEBHOOK_SECRETS is required"):
        WebhookSettings.from_env({"ANIMFLEET_WEBHOOK_SECRETS": ""})


SHORT = "whsec_" + base64.b64encode(b"tooshort").decode()


@pytest.mark.parametrize(
    "secrets",
    [f"{NEW},{SHORT}", f"{SHORT}", "not-a-whsec-secret-at-all", f"{OLD}, whsec_not*base64"],
)
def test_a_bad_secret_is_named_but_never_shown(secrets: str) -> None:
    env = {"ANIMFLEET_WEBHOOK_SECRETS": secrets, "ANIMFLEET_WEBHOOK_JITTER": "2"}
    with pytest.raises(SettingsError) as caught:
        WebhookSettings.from_env(env)
    message = str(caught.value)
    assert "ANIMFLEET_WEBHOOK_SECRETS=***" in message and "ANIMFLEET_WEBHOOK_JITTER='2'" in message
    for part in secrets.split(","):
        secret = part.strip()
        assert secret not in message and secret.removeprefix("whsec_") not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_settings_name_a_bad_delay_and_its_whole_value() -> None:
    env = {"ANIMFLEET_WEBHOOK_SECRETS": NEW, "ANIMFLEET_WEBHOOK_SCHEDULE_S": "0,5,soon"}
    with pytest.raises(SettingsError, match="ANIMFLEET_WEBHOOK_SCHEDULE_S='0,5,soon'"):
        WebhookSettings.from_env(env)
    env["ANIMFLEET_WEBHOOK_SCHEDULE_S"] = "0,-5"
    with pytest.raises(SettingsError, match="retry delays must be >= 0"):
        WebhookSettings.from_env(env)
    env = {"ANIMFLEET_WEBHOOK_SECRETS": NEW, "ANIMFLEET_WEBHOOK_METRICS_PORT": "9102"}
    assert WebhookSettings.from_env(env).metrics_port == 9102


def test_the_default_schedule_spans_more_than_a_day_and_starts_fast() -> None:
    schedule = WebhookSettings(secrets=(NEW,)).schedule_s  # type: ignore[arg-type]
    assert schedule[:2] == (0.0, 5.0) and sum(schedule) > 24 * 3600
