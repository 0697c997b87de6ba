"""updater.commands.autoinstall.eligibility: whether a server's background check installs the
release it found, asked in this process of a throwaway install. The rules themselves are
tables in test_core.py and test_auto_install.py runs the servers that act on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.offers import release_offer
from updater.commands.autoinstall import eligibility
from updater.config import settings as mux_settings
from updater.config.buildinfo import BuildInfo
from updater.core.request import Decision

BUILD = BuildInfo(version="1.0.0", protocol_version=2, target="x", repo="", development=False)


@pytest.fixture
def settings(tmp_path: Path) -> mux_settings.Settings:
    home = tmp_path / "home"
    loaded = mux_settings.load(
        {
            "HOME": str(home),
            "XDG_STATE_HOME": str(home / "state"),
            "XDG_CACHE_HOME": str(home / "cache"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_RUNTIME_DIR": str(tmp_path / "run"),
            "MUX_HOME": str(home / "mux"),
            "MUX_INSTALL_DIR": str(home / "bin"),
        }
    )
    return loaded._replace(auto_install="compatible")


def never_metered() -> bool:
    return False


def test_an_update_of_the_same_protocol_installs_when_asked(settings) -> None:
    offer = release_offer(Decision.UPDATE)._replace(protocol_version=BUILD.protocol_version)
    decided = eligibility(settings, BUILD, offer, installed="1.0.0", metered=never_metered)
    assert decided.install, decided.reason
    assert (decided.version, decided.protocol_version) == ("2.0.0", 2)


def test_nothing_is_installed_when_off_or_not_an_update(settings) -> None:
    update = release_offer(Decision.UPDATE)
    off = eligibility(settings._replace(auto_install="off"), BUILD, update, installed="1.0.0")
    assert not off.install and off.reason
    for offer in (release_offer(Decision.UP_TO_DATE), release_offer(Decision.UPDATE, asset=False)):
        assert not eligibility(settings, BUILD, offer, installed="1.0.0").install


def test_a_metered_connection_holds_the_download_unless_allowed(settings) -> None:
    offer = release_offer(Decision.UPDATE)._replace(protocol_version=BUILD.protocol_version)
    held = eligibility(settings, BUILD, offer, installed="1.0.0", metered=lambda: True)
    assert not held.install and "metered" in held.reason
    allowed = settings._replace(download_on_metered=True)
    assert eligibility(allowed, BUILD, offer, installed="1.0.0", metered=lambda: True).install


def test_a_new_protocol_with_no_live_server_to_break_installs(settings) -> None:
    """ "compatible" is about the servers running: with none, a new protocol breaks nothing."""
    offer = release_offer(Decision.UPDATE)._replace(protocol_version=BUILD.protocol_version + 1)
    decided = eligibility(settings, BUILD, offer, installed="1.0.0", metered=never_metered)
    assert decided.install and decided.restart_needed == ()


def test_a_policy_that_turns_updates_off_wins(settings) -> None:
    offer = release_offer(Decision.UPDATE)
    decided = eligibility(settings._replace(updates="check-only"), BUILD, offer, installed="1.0.0")
    assert not decided.install and 'updates = "check-only"' in decided.reason
