"""The source interface's pages. Plain HTML forms; nothing needs JavaScript."""
from __future__ import annotations

from typing import Any

from twisted.web.template import Tag, tags

from deaddrop.sources import Reply
from deaddrop.web._common.pages import csrf_field, layout
from deaddrop.web._common.sessions import Session

HONEYPOT_FIELD = "website"


def _page(site_name: str, title: str, body: list[Any], session: Session | None, logged_in: bool = False, demo: bool = False) -> Tag:
    nav = [tags.a("Log out", href="/logout", class_="button secondary")] if logged_in else []
    if demo:
        body = [tags.p("DEMO INSTANCE: submissions here go to a throwaway key. Do not use it for anything real.",
                       class_="flash flash-error")] + body
    return layout(title=title, site_name=site_name, body=body, nav=nav,
                  flashes=session.pop_flashes() if session else ())


def index(site_name: str, session: Session | None, demo: bool) -> Tag:
    return _page(site_name, "Share information securely", [
        tags.h1(f"Share information with {site_name}"),
        tags.p("This drop box lets you send messages and documents to our journalists, and read their "
               "replies, without revealing who you are. We cannot see your IP address or anything about your "
               "device. Keep this page in Tor Browser and set its security level to Safest."),
        tags.div(class_="choices")(
            tags.section(class_="card")(
                tags.h2("First submission"),
                tags.p("You will get a codename: a few random words that let you come back, read replies and "
                       "send more. We never learn or store it."),
                tags.a("Get started", href="/generate", class_="button"),
            ),
            tags.section(class_="card")(
                tags.h2("Return visit"),
                tags.p("Already have a codename? Log in to check for replies or send more."),
                tags.a("Log in", href="/login", class_="button secondary"),
            ),
        ),
    ], session, demo=demo)


def generate(site_name: str, session: Session, codename: str, demo: bool) -> Tag:
    return _page(site_name, "Your codename", [
        tags.h1("Your codename"),
        tags.p("This is your codename. Write it down on paper or memorise it, and keep it somewhere safe. "
               "You need it to log in again and read replies from our journalists."),
        tags.p(codename, id="codename", class_="codename"),
        tags.p("We do not store your codename and cannot recover it for you. Anyone who knows it can read "
               "the replies sent to you, so never share it.", class_="hint"),
        tags.form(method="post", action="/create")(
            csrf_field(session),
            tags.input(type="hidden", name="codename", value=codename),
            tags.div(class_="actions")(
                tags.button("I have saved my codename: continue", type="submit"),
                tags.a("Show me a different one", href="/generate", class_="button secondary"),
            ),
        ),
    ], session, demo=demo)


def login(site_name: str, session: Session, error: str | None, demo: bool) -> Tag:
    body = [tags.h1("Log in with your codename")]
    if error:
        body.append(tags.p(error, class_="flash flash-error", role="alert"))
    body.append(tags.form(method="post", action="/login", class_="card")(
        csrf_field(session),
        tags.label("Codename", for_="codename"),
        tags.input(type="password", name="codename", id="codename", autocomplete="off", autofocus="",
                   spellcheck="false", autocapitalize="off", maxlength="256", required=""),
        tags.p("Spaces at the start or end do not matter.", class_="hint"),
        tags.div(class_="actions")(tags.button("Continue", type="submit"), tags.a("Cancel", href="/")),
    ))
    return _page(site_name, "Log in", body, session, demo=demo)


def lookup(site_name: str, session: Session, replies: list[Reply], *, allow_uploads: bool,
           max_upload_size: int, message: str = "", error: str | None = None, demo: bool = False) -> Tag:
    body: list[Any] = [tags.h1("Submit files or messages")]
    if error:
        body.append(tags.p(error, class_="flash flash-error", role="alert"))
    form = tags.form(method="post", action="/submit", enctype="multipart/form-data", class_="card")(
        # First in the body, so the server knows the request is genuine before any file arrives.
        csrf_field(session),
        tags.div(class_="honey", **{"aria-hidden": "true"})(
            tags.label("Leave this field empty", for_=HONEYPOT_FIELD),
            tags.input(type="text", name=HONEYPOT_FIELD, id=HONEYPOT_FIELD, tabindex="-1", autocomplete="off"),
        ),
        tags.label("Message", for_="msg"),
        tags.textarea(message, name="msg", id="msg", maxlength="100000",
                      placeholder="Write a message. It is encrypted before it is stored."),
    )
    if allow_uploads:
        form(
            tags.label("Documents", for_="fh"),
            tags.input(type="file", name="fh", id="fh", multiple=""),
            tags.p(f"Up to {_human_size(max_upload_size)} in total. Consider removing metadata from files first.",
                   class_="hint"),
        )
    form(tags.div(class_="actions")(tags.button("Submit", type="submit")))
    body.append(form)
    body.append(tags.h2("Replies"))
    if not replies:
        body.append(tags.p("There are no replies yet. Check back later.", class_="hint"))
    else:
        body.append(tags.p("Please delete replies once you have read them: a deleted reply cannot be read by "
                           "anyone who learns your codename later.", class_="flash flash-warning"))
        for reply in replies:
            text = reply.text if reply.text is not None else "(This reply could not be decrypted.)"
            body.append(tags.article(class_="card")(
                tags.p(text, class_="reply"),
                tags.form(method="post", action="/delete")(
                    csrf_field(session),
                    tags.input(type="hidden", name="reply_filename", value=reply.filename),
                    tags.button("Delete this reply", type="submit", class_="secondary"),
                ),
            ))
        body.append(tags.form(method="post", action="/delete-all")(
            csrf_field(session), tags.button("Delete all replies", type="submit", class_="danger"),
        ))
    return _page(site_name, "Your submissions", body, session, logged_in=True, demo=demo)


def logged_out(site_name: str) -> Tag:
    return _page(site_name, "Logged out", [
        tags.h1("You are logged out"),
        tags.p("To finish, close Tor Browser or choose New Identity from its menu, so nothing of this visit "
               "stays on this computer."),
        tags.p(tags.a("Back to the start", href="/")),
    ], None)


def _human_size(n: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "bytes" else f"{n:.0f} {unit}"
        n /= 1024
    return str(n)
