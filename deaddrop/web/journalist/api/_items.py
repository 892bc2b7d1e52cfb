"""What a source's submissions and its replies share in the API: the same five routes.

``/<plural>`` (every one), ``/sources/<uuid>/<plural>`` (a source's), and
``/sources/<uuid>/<plural>/<item>`` to read (GET), delete (DELETE) or ``/download``. Each kind
says what differs in an ``Items``; ``add_item_routes`` adds its routes, with the endpoint names
each had written out (``all_replies``, ``replies``, ``reply``, ``delete_reply``, ``download_reply``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from deaddrop.newsroom.accounts import Journalist
from deaddrop.web._common.deferreds import shield
from deaddrop.web._common.routes import Routes
from deaddrop.web.journalist.api._shared import PREFIX, token_route
from deaddrop.web.journalist.api.interface import ApiSite


@dataclass(frozen=True)
class Items:
    plural: str  # the URL's segment and the listing's key: "submissions"
    singular: str  # in the endpoints' names: "submission"
    to_json: Callable[[Any], dict[str, Any]]
    every: Callable[[Any, int], Any]  # desk, reader -> Deferred of every item the reader may see
    of_source: Callable[[Any, Any], Any]  # desk, source -> Deferred of its items
    find: Callable[[Any, Any, str], Any]  # desk, source, uuid -> Deferred of the item or None
    delete: Callable[[Any, Any, Any], Any]  # desk, source, item -> Deferred
    open: Callable[[Any, Any, Any, int], Any]  # desk, source, item, journalist id -> Deferred of the download
    missing: str  # the 404 message for an unknown item
    gone: str  # the 404 message for a download whose file is gone
    deleted: str  # the message once deleted


def item_json(x: Any, plural: str, singular: str) -> dict[str, Any]:
    """The fields a submission and a reply both have (``x`` a ``SubmissionView`` or ``ReplyView``)."""
    url = f"{PREFIX}/sources/{x.source_uuid}/{plural}/{x.uuid}"
    return {
        "uuid": x.uuid,
        "filename": x.filename,
        "size": x.size,
        "seen_by": list(x.seen_by),
        "source_uuid": x.source_uuid,
        "source_url": f"{PREFIX}/sources/{x.source_uuid}",
        f"{singular}_url": url,
        "download_url": f"{url}/download",
    }


def add_item_routes(routes: Routes, items: Items) -> None:
    """Add the five routes of ``items`` to ``routes``."""
    plural, singular = items.plural, items.singular

    def every(self: ApiSite, request: Any, journalist: Journalist):
        found = yield items.every(self.desk, journalist.id)
        return self.json_response(request, {plural: [items.to_json(x) for x in found]})

    def of_source(self: ApiSite, request: Any, journalist: Journalist, uuid: str):
        source = yield self.find_source(journalist, uuid)
        found = yield items.of_source(self.desk, source)
        return self.json_response(request, {plural: [items.to_json(x) for x in found]})

    def _item(self: ApiSite, journalist: Journalist, uuid: str, item: str):
        return self.find_source_item(journalist, uuid, item, lambda source, u: items.find(self.desk, source, u), items.missing)

    def one(self: ApiSite, request: Any, journalist: Journalist, uuid: str, item: str):
        _, found = yield _item(self, journalist, uuid, item)
        return self.json_response(request, items.to_json(found))

    def delete(self: ApiSite, request: Any, journalist: Journalist, uuid: str, item: str):
        source, found = yield _item(self, journalist, uuid, item)
        yield shield(items.delete(self.desk, source, found))
        return self.json_response(request, {"message": items.deleted})

    def download(self: ApiSite, request: Any, journalist: Journalist, uuid: str, item: str):
        source, found = yield _item(self, journalist, uuid, item)
        return (yield self.download(request, items.open(self.desk, source, found, journalist.id), items.gone))

    one_url = f"/sources/<uuid>/{plural}/<item>"
    for name, url, method, f in ((f"all_{plural}", f"/{plural}", "GET", every),
                                 (plural, f"/sources/<uuid>/{plural}", "GET", of_source),
                                 (singular, one_url, "GET", one),
                                 (f"delete_{singular}", one_url, "DELETE", delete),
                                 (f"download_{singular}", f"{one_url}/download", "GET", download)):
        f.__name__ = f.__qualname__ = name  # the endpoint's name: one per route in the API's app
        token_route(routes, url, method)(f)
