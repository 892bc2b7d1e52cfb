"""The source interface's pages. Plain HTML forms; nothing needs JavaScript.

Every visible string goes through the page's ``Language`` (gettext catalogs under
``locales/``). Pages are built from ``twisted.web.template`` tags, so text is always escaped.
"""
from __future__ import annotations

import datetime
from urllib.parse import quote
from decimal import ROUND_DOWN, Decimal
from dataclasses import dataclass, field
from typing import Any, Iterable

from twisted.web.template import Tag, tags

from deaddrop.web._common.pages import head
from deaddrop.i18n import numerals
from deaddrop.web.source import i18n
from deaddrop.web.source.i18n import LANGUAGES, N_, Counted, Language, Np_, fill

HONEYPOT_FIELD = "website"
# Each submission form's own one-time token (see web/source/_submission_forms.py).
FORM_TOKEN_FIELD = "form_token"
MAX_MESSAGE_CHARS = 100_000


def message_chars(message: str) -> int:
    """A message's length as the textarea's ``maxlength`` counted it while the source typed:
    the browser sends each line break as CRLF, but counted it as one character, so a message
    that fit in the box must fit here too (and is never refused, or cut, for its line breaks)."""
    return len(message.replace("\r\n", "\n"))


def within_limit(message: str) -> str:
    """``message`` to give back in a form: line breaks as the box holds them, and no longer than
    the box takes (a message a browser sent is never cut: ``message_chars``)."""
    return message.replace("\r\n", "\n")[:MAX_MESSAGE_CHARS]
# Files in one submission at most. Each is its own gpg run, stored file and database row, and
# a body's files are encrypted one after another on its one pump slot: the bound keeps one
# body's work (and the journalist's list) bounded, far above what a source picks from a folder.
MAX_FILES = 1000
# What login accepts (codenames.normalise_codename), said wherever a codename is shown.
CODENAME_WORDS_HINT = N_("The codename words are English words, whatever language you use here. Capital letters "
                         "do not matter, and spaces, commas, hyphens, dots or new lines may separate the words.")
# Where the language menu may send a source back to (never a URL taken from the request).
RETURN_PATHS = frozenset({"/", "/login", "/lookup", "/safety", "/generate", "/desks"})
# Pages whose form the language menu posts, so that what was typed comes along: the form's id,
# and the page the menu's POST comes back to (see SourceInterface.carry_language).
LOGIN_FORM = ("login-form", "/login")
SUBMISSION_FORM = ("send-form", "/lookup")
DESK_FORM = ("desk-form", "/desks")
# The replies part of the page once the source has deleted every reply it had (in this session).
REPLIES_GONE = N_("You have deleted the replies you received. If our journalists write to you again, their replies "
                  "will appear here.")
FILES_STAY_BEHIND = N_("Files cannot be carried over to another language: if you change the language, choose them "
                       "again afterwards.")
# TRANSLATORS: a language's entry in the menu while some of its messages are still in English;
# {language} is the language's name, and this is said in that language, for its readers.
INCOMPLETE_ENTRY = N_("{language} (incomplete)")


@dataclass
class CustomTexts:
    """What admins wrote for the source pages, already resolved to the page's language."""

    welcome: str = ""
    instructions: str = ""
    logo_url: str | None = None


@dataclass
class PageContext:
    """Everything the page frame needs: language, who is looking, and the instance's limits."""

    lang: Language
    site_name: str
    path: str = "/"
    csrf_token: str | None = None
    flashes: Iterable[tuple[str, str]] = ()
    logged_in: bool = False
    demo: bool = False
    tor_browser: bool = True
    session_minutes: int = 120
    max_upload_size: int = 500 * 1024 * 1024
    allow_uploads: bool = True
    custom: CustomTexts = field(default_factory=CustomTexts)
    # With several desks (issue 29), a logged-in source's: the names its messages go to, in the
    # page's language, and whether there is a desk it may still add. Empty with one desk.
    desks: tuple[str, ...] = ()
    more_desks: bool = False

    def _(self, message: str | Counted, **values: Any) -> str:
        """``message`` in the page's language; whole numbers in ``values`` are written the
        language's way, and a ``Counted`` message says its counts in the right plural form."""
        if isinstance(message, Counted):
            return message.say(self.lang, self.number, values)
        text = self.lang.gettext(message)
        if not values:
            return text
        return fill(text, message, {k: self.number(v) if isinstance(v, int) and not isinstance(v, bool) else v
                                    for k, v in values.items()})

    def number(self, n: float) -> str:
        """``n`` in the language's digits and separators (Persian digits in Farsi: ``numerals``)."""
        return numerals.number(n, self.lang.code)

    def size(self, n_bytes: int) -> str:
        """Bytes in megabytes (10^6), the unit a non-specialist knows from their files, and the
        one the admin sets. Three significant digits (whole MB from 100 MB), rounded down: a
        limit is never stated larger than it is, nor as "0 MB"."""
        return self._("{n} MB", n=numerals.number(size_in_mb(n_bytes), self.lang.code, exact=True))

    def date(self, timestamp: float) -> str:
        """The day of ``timestamp`` written out, in the language's calendar (Solar Hijri in Farsi)."""
        return numerals.day(datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).date(), self.lang.code)


def size_in_mb(n_bytes: int) -> Decimal:
    """``n_bytes`` in MB to three significant digits, rounded down (whole MB from 100 MB)."""
    mb = Decimal(max(0, int(n_bytes))) / Decimal(1_000_000)
    if mb == 0:
        return mb
    quantum = Decimal(1).scaleb(min(0, mb.adjusted() - 2))
    return mb.quantize(quantum, rounding=ROUND_DOWN).normalize() if mb < 1000 else mb.quantize(Decimal(1), rounding=ROUND_DOWN)


@dataclass
class ShownReply:
    number: int  # Reply.number: the file name would show the newsroom's designation
    text: str | None  # None when it could not be decrypted
    created_at: float
    new: bool = False


def _csrf(ctx: PageContext) -> Tag | str:
    return tags.input(type="hidden", name="csrf_token", value=ctx.csrf_token) if ctx.csrf_token else ""


def _error(message: str | None) -> Tag | str:
    return tags.p(message, class_="flash flash-error", role="alert") if message else ""


# -- the frame -------------------------------------------------------------------------------

def menu_name(code: str) -> str:
    """A language's entry in the menu: its own name, in its own language, and whether it is
    incomplete, said in that language too (a reader of that language is choosing it)."""
    name = LANGUAGES[code][0]
    lang = i18n.language(code)
    return name if lang.complete else fill(lang.gettext(INCOMPLETE_ENTRY), INCOMPLETE_ENTRY, {"language": name})


def _language_menu(ctx: PageContext, carry: tuple[str, str] | None = None) -> Tag:
    if carry is not None:
        return _language_buttons(ctx, *carry)
    back = ctx.path if ctx.path in RETURN_PATHS else "/"
    # On the codename page the form's sealed token rides along, so the same codename comes back
    # in the other language (it is encrypted, bound to this browser's cookie, and expires).
    keep = f"&keep={quote(ctx.csrf_token, safe='')}" if back == "/generate" and ctx.csrf_token else ""
    items = []
    for code in LANGUAGES:
        tag = i18n.bcp47(code)
        link = tags.a(menu_name(code), href=f"/language/{code}?next={back}{keep}", lang=tag, hreflang=tag)
        if code == ctx.lang.code:
            link(**{"aria-current": "true"})
        items.append(tags.li(link))
    return tags.nav(class_="languages", **{"aria-label": ctx._("Language")})(tags.ul(*items))


def _language_buttons(ctx: PageContext, form_id: str, back: str) -> Tag:
    """The menu of a page with a form: each language is a submit button of that form, posting
    what was typed to the language route (no JavaScript). Urlencoded, whatever the form's own
    encoding: a file input then sends only the file's name, never its bytes (and the route takes
    no multipart body at all). No validation: an empty codename box must not stop a switch.
    The buttons come before the form in the page, so a text input in it would make the first
    of them the form's default button: these forms have none (a textarea takes Enter itself)."""
    items = []
    for code in LANGUAGES:
        button = tags.button(menu_name(code), type="submit", form=form_id, formaction=f"/language/{code}?next={back}",
                             formmethod="post", formenctype="application/x-www-form-urlencoded",
                             formnovalidate="", lang=i18n.bcp47(code), class_="link")
        if code == ctx.lang.code:
            button(**{"aria-current": "true"})
        items.append(tags.li(button))
    return tags.nav(class_="languages", **{"aria-label": ctx._("Language")})(tags.ul(*items))


def _banners(ctx: PageContext) -> list[Any]:
    out: list[Any] = []
    if not ctx.tor_browser:
        out.append(tags.div(class_="banner", id="tor-browser-warning", role="note")(
            tags.strong(ctx._("You do not seem to be using Tor Browser.")), ctx.lang.space,
            ctx._("To protect your identity, close this page and open this address in Tor Browser, "
                  "which you can get from torproject.org (or by email from gettor@torproject.org). "
                  "If you are already using Tor Browser, you can ignore this message."),
        ))
    if ctx.demo:
        out.append(tags.p(ctx._("DEMO INSTANCE: submissions here go to a throwaway key. Do not use it for anything real."),
                          class_="flash flash-error"))
    return out


def _frame(ctx: PageContext, title: str, body: list[Any], body_class: str = "",
           carry: tuple[str, str] | None = None, desks_panel: bool = True) -> Tag:
    """The page around ``body``; ``carry``: the page's form that the language menu posts;
    ``desks_panel``: where a logged-in source's messages go, at the end (unless the page puts
    it in place itself)."""
    nav = [tags.a(ctx._("How to stay safe"), href="/safety")]
    if ctx.logged_in:
        nav.append(tags.a(ctx._("Log out"), href="/logout", class_="button secondary"))
    brand = [tags.a(href="/", dir="auto")(
        tags.img(src=ctx.custom.logo_url, alt="", class_="logo") if ctx.custom.logo_url else "",
        ctx.site_name,
    )]
    flashes = [tags.p(message, class_=f"flash flash-{category}", role="status") for category, message in ctx.flashes]
    return tags.html(lang=ctx.lang.tag, dir=ctx.lang.direction)(
        head(f"{title} · {ctx.site_name}"),
        tags.body(class_=("source " + body_class).strip())(
            tags.header(class_="top")(
                tags.div(class_="brand")(*brand),
                tags.nav(*nav, **{"aria-label": ctx._("Main")}),
                _language_menu(ctx, carry),
            ),
            Tag("main")(*_banners(ctx), tags.div(*flashes, class_="flashes") if flashes else "", *body,
                        _desks_panel(ctx) if desks_panel else ""),
            tags.footer(
                tags.p(tags.a(ctx._("How to stay safe"), href="/safety"), " · ", ctx._("Powered by DeadDrop")),
            ),
        ),
    )


def _desks_panel(ctx: PageContext) -> Tag | str:
    """Where a logged-in source's messages go, on every page, in a panel closed until the source
    opens it (as its codename is): someone glancing at the screen learns no more than before
    desks. Nothing with one desk."""
    if not (ctx.logged_in and ctx.desks):
        return ""
    _ = ctx._
    return tags.details(class_="card reveal", id="desks")(
        tags.summary(_("Who reads your messages")),
        tags.p(_("Your messages go to:")),
        tags.ul(*(tags.li(name, dir="auto") for name in ctx.desks)),
        tags.p(tags.a(_("Add a desk"), href="/desks")) if ctx.more_desks else "",
    )


# What a source may send, and how long a login lasts (the hint under the form, the landing page).
_LIMITS_WITH_FILES = Counted(
    (Np_("You can send a message of up to {n} character and files of up to {size} in total.",
         "You can send a message of up to {n} characters and files of up to {size} in total."), "chars"),
    (Np_("For your safety, you are logged out {n} minute after logging in.",
         "For your safety, you are logged out {n} minutes after logging in."), "minutes"))
_LIMITS_NO_FILES = Counted(
    (Np_("You can send a message of up to {n} character. This drop box does not accept files at the moment.",
         "You can send a message of up to {n} characters. This drop box does not accept files at the moment."),
     "chars"),
    _LIMITS_WITH_FILES.parts[1])
_RETENTION = Counted(
    (Np_("Submissions are deleted from this server at the latest {n} day after they arrive, and sooner once our "
         "journalists have dealt with them.",
         "Submissions are deleted from this server at the latest {n} days after they arrive, and sooner once our "
         "journalists have dealt with them."), "days"))


def _limits(ctx: PageContext) -> str:
    if ctx.allow_uploads:
        return ctx._(_LIMITS_WITH_FILES, chars=MAX_MESSAGE_CHARS, size=ctx.size(ctx.max_upload_size),
                     minutes=ctx.session_minutes)
    return ctx._(_LIMITS_NO_FILES, chars=MAX_MESSAGE_CHARS, minutes=ctx.session_minutes)


def _paragraphs(text: str, class_: str = "custom") -> Tag:
    """Admin-written text: plain text, blank lines make paragraphs (no HTML is interpreted)."""
    return tags.div(class_=class_)(*[tags.p(p.strip(), dir="auto") for p in text.split("\n\n") if p.strip()])


# -- pages -----------------------------------------------------------------------------------

def index(ctx: PageContext) -> Tag:
    _ = ctx._
    intro: Any = _paragraphs(ctx.custom.welcome) if ctx.custom.welcome else tags.p(_(
        "This drop box lets you send messages and documents to our journalists, and read their replies, "
        "without telling us who you are. We cannot see your IP address or anything about your device."))
    return _frame(ctx, _("Share information securely"), [
        tags.h1(_("Share information with {name}", name=ctx.site_name)),
        intro,
        tags.section(class_="card guidance", **{"aria-labelledby": "before"})(
            tags.h2(_("Before you start"), id="before"),
            tags.ul(
                tags.li(_("Use Tor Browser, with its security level set to Safest.")),
                tags.li(_("Do not use a computer, phone or network that belongs to your work.")),
                tags.li(_("Remove hidden information (metadata) from documents before you send them.")),
            ),
            tags.p(_limits(ctx), class_="hint"),
            tags.p(tags.a(_("Read how to stay safe"), href="/safety")),
        ),
        tags.div(class_="choices")(
            tags.section(class_="card", **{"aria-labelledby": "first"})(
                tags.h2(_("First time here"), id="first"),
                tags.p(_("You will get a codename: a few random words that let you come back, read replies and "
                         "send more. We never learn or store it.")),
                tags.a(_("Get a codename"), href="/generate", class_="button"),
            ),
            tags.section(class_="card", **{"aria-labelledby": "return"})(
                tags.h2(_("Coming back"), id="return"),
                tags.p(_("Already have a codename? Log in to read replies or send more.")),
                tags.a(_("Log in"), href="/login", class_="button secondary"),
            ),
        ),
    ])


# The safety page after its opening paragraph: each section a heading and what follows it, a
# paragraph (a message) or a bulleted list (a tuple of them). _READERS is said with the site's
# name; _KEPT stands for the sentence on how long submissions are kept.
_READERS = N_("Only journalists of {name} can read what you send. We do not record your IP address, "
              "your browser or your device.")
_KEPT: Any = object()
_SAFETY_SECTIONS: tuple[tuple[Any, ...], ...] = (
    (N_("Use Tor Browser, set to Safest"),
     N_("Open this site only in Tor Browser. It hides where you are and which device you use. "
        "In Tor Browser, open the shield menu, choose Settings, and set the security level to Safest. "
        "This site works fully at that level."),
     N_("You can get Tor Browser from torproject.org. If that site is blocked where you are, "
        "send an email to gettor@torproject.org to get a copy.")),
    (N_("Do not use a work device or network"),
     N_("Employers can often see what is done on their computers, phones and networks. Use your own "
        "device, on a network that has nothing to do with your work. Do not use a device that someone "
        "else controls or watches.")),
    (N_("Remove hidden information from documents"),
     N_("Files often carry hidden information, called metadata: the author's name, dates, the name of "
        "the computer, sometimes the place where a photo was taken. Before you send a file:"),
     (N_("Photos: take a screenshot of the photo and send the screenshot."),
      N_("Documents: copy the text into a new plain text file, or print the document and scan "
         "or photograph the paper, or use your software's tool for removing personal information."),
      N_("Think about what the content reveals: if only a few people saw a document, sending it "
         "may point to you.")),
     N_("If you are not sure, say so in your message: our journalists can help.")),
    (N_("What happens to what you send"),
     N_("Your message and files are encrypted as soon as they reach our server, before anything is "
        "saved. The server cannot read them. Our journalists copy them to a computer that is never "
        "connected to the internet, and only there are they decrypted and read.")),
    (N_("Who reads it and how long it is kept"), _READERS, _KEPT, N_("A reply you delete is removed at once.")),
    (N_("Why a codename"),
     N_("We never ask for your name or email address. Instead you get a codename: a few random "
        "words. It is the only way to come back, read our replies and send more. We do not store it, "
        "so we cannot give it back if you lose it. Write it on paper and keep it in a safe place, "
        "or learn it by heart, and never share it."),
     CODENAME_WORDS_HINT),
    (N_("When you are done"), N_("Log out, then close Tor Browser, or choose New Identity in its menu.")),
)


def safety(ctx: PageContext, retention_days: int | None = None) -> Tag:
    _ = ctx._
    if retention_days:
        kept = _(_RETENTION, days=retention_days)
    else:
        kept = _("Submissions are kept only as long as our journalists need them, then deleted.")

    def part(said: Any) -> Tag:
        if isinstance(said, tuple):
            return tags.ul(*(tags.li(_(item)) for item in said))
        if said is _KEPT:
            return tags.p(kept)
        return tags.p(_(said, name=ctx.site_name) if said is _READERS else _(said))

    sections = [element for heading, *parts in _SAFETY_SECTIONS
                for element in (tags.h2(_(heading)), *(part(said) for said in parts))]
    return _frame(ctx, _("How to stay safe"), [
        tags.h1(_("How to stay safe")),
        tags.p(_("No tool can make you completely safe, but these steps lower the risk a lot. "
                 "Please read them before you send anything.")),
        *sections,
        tags.p(tags.a(_("Back to the start"), href="/")),
    ])


def generate(ctx: PageContext, codename: str, error: str | None = None) -> Tag:
    """The codename page; shown again with ``error`` (and the same codename) when /create could
    not take it yet, so a source who wrote it down never loses it."""
    _ = ctx._
    return _frame(ctx, _("Your codename"), [
        tags.h1(_("Your codename")),
        _error(error),
        tags.p(_("This is your codename. Write it down on paper or learn it by heart, and keep it somewhere safe. "
                 "You need it to come back and read replies from our journalists.")),
        tags.p(codename, id="codename", class_="codename", lang="en", dir="ltr"),
        tags.p(_(CODENAME_WORDS_HINT), class_="hint"),
        tags.p(_("We do not store your codename and cannot give it back if you lose it. Anyone who knows it can "
                 "read the replies sent to you, so never share it."), class_="hint"),
        tags.form(method="post", action="/create")(
            _csrf(ctx),
            tags.input(type="hidden", name="codename", value=codename),
            tags.div(class_="actions")(
                tags.button(_("I have saved my codename: continue"), type="submit"),
                tags.a(_("Show me a different one"), href="/generate", class_="button secondary"),
            ),
        ),
    ])


def login(ctx: PageContext, error: str | None = None, notice: str | None = None, carried: str = "",
          codename: str = "", form_token: str | None = None) -> Tag:
    """The login form; ``carried`` is a message typed before the session expired, sent after login
    (on its submission form's token, ``form_token``, when it came from one); ``codename`` what was
    typed, shown again after a refused login or a language switch."""
    _ = ctx._
    form = tags.form(method="post", action="/login", class_="card", id=LOGIN_FORM[0])(
        _csrf(ctx),
        tags.label(_("Codename"), for_="codename"),
        # Plain text, not a password field: a source copying from paper must see what they type.
        tags.textarea(codename, name="codename", id="codename", rows="2", autocomplete="off", spellcheck="false",
                      autocapitalize="off", autocorrect="off", maxlength="256", required="", lang="en", dir="ltr",
                      **{"aria-describedby": "codename-hint"}),
        tags.p(_("Type the words of your codename. Spaces, commas, hyphens, dots or new lines between the words "
                 "are all fine, and capital letters do not matter."), id="codename-hint", class_="hint"),
    )
    if carried:
        form(
            tags.input(type="hidden", name=FORM_TOKEN_FIELD, value=form_token) if form_token else "",
            tags.label(_("Your message, kept for you"), for_="msg"),
            tags.textarea(carried, name="msg", id="msg", maxlength=str(MAX_MESSAGE_CHARS), dir="auto"),
            tags.p(_("It will be sent as soon as you log in. Files cannot be kept: choose them again after "
                     "logging in."), class_="hint"),
        )
    form(tags.div(class_="actions")(tags.button(_("Log in"), type="submit"), tags.a(_("Cancel"), href="/")))
    return _frame(ctx, _("Log in"), [
        tags.h1(_("Log in with your codename")),
        tags.p(notice, class_="flash flash-warning", role="status") if notice else "",
        _error(error),
        form,
    ], carry=LOGIN_FORM)


def lookup(ctx: PageContext, replies: list[ShownReply] | None, *, message: str = "", error: str | None = None,
           codename: str | None = None, form_token: str = "", replies_deleted: bool = False) -> Tag:
    """The logged-in page: new-reply notice, the submission form, then the replies, newest first.
    ``replies_deleted``: the source deleted replies in this session (an empty list is then not
    "no replies yet")."""
    _ = ctx._
    new = sum(1 for r in replies or () if r.new)
    body: list[Any] = [tags.h1(_("Send more and read replies"))]
    if new:
        body.append(tags.p(tags.a(ctx._(_NEW_REPLIES, count=new), href="#replies"), class_="flash flash-ok",
                           id="new-replies"))
    if codename:
        body.append(tags.details(class_="card reveal")(
            tags.summary(_("Show my codename")),
            tags.p(codename, class_="codename", lang="en", dir="ltr"),
            tags.p(_("Keep it on paper in a safe place, never in a file or a phone. Close this panel when "
                     "others can see your screen."), class_="hint"),
        ))
    body.append(_desks_panel(ctx))
    body.append(_submission_form(ctx, message, error, form_token))
    if replies is None:  # a page answered before the replies were read (e.g. a refused upload)
        body.append(tags.p(tags.a(_("Back to your page"), href="/lookup")))
        return _frame(ctx, _("Send more and read replies"), body, carry=SUBMISSION_FORM, desks_panel=False)
    body.append(tags.h2(_("Replies from {name}", name=ctx.site_name), id="replies"))
    if not replies and replies_deleted:
        body.append(tags.p(_(REPLIES_GONE), class_="hint", id="replies-deleted"))
    elif not replies:
        body.append(tags.p(_("There are no replies yet. Journalists may take days to answer: please check back "
                             "later."), class_="hint"))
    else:
        body.append(tags.p(_("Please delete replies once you have read them: a deleted reply cannot be read by "
                             "anyone who learns your codename later."), class_="flash flash-warning"))
        for reply in replies:  # newest first, as given
            text = reply.text if reply.text is not None else _("(This reply could not be decrypted.)")
            heading = [tags.time(ctx.date(reply.created_at), datetime=_iso_day(reply.created_at))]
            if reply.new:
                heading.append(tags.span(_("New"), class_="badge"))
            body.append(tags.article(class_="card")(
                tags.p(*heading, class_="reply-date"),
                tags.p(text, class_="reply", dir="auto"),
                tags.form(method="post", action="/delete")(
                    _csrf(ctx),
                    tags.input(type="hidden", name="reply", value=str(reply.number)),
                    tags.button(_("Delete this reply"), type="submit", class_="secondary"),
                ),
            ))
        body.append(tags.form(method="post", action="/delete-all")(
            _csrf(ctx), tags.button(_("Delete all replies"), type="submit", class_="danger"),
        ))
    return _frame(ctx, _("Send more and read replies"), body, carry=SUBMISSION_FORM, desks_panel=False)


_NEW_REPLIES = Counted((Np_("{n} new reply", "{n} new replies"), "count"))


def _iso_day(timestamp: float) -> str:
    return datetime.datetime.fromtimestamp(timestamp, datetime.timezone.utc).date().isoformat()


def _what_happens_next(ctx: PageContext) -> Tag:
    _ = ctx._
    return tags.section(class_="card next", **{"aria-labelledby": "next"})(
        tags.h2(_("What happens next"), id="next"),
        tags.p(_("Your submission is encrypted and waiting for our journalists. They read submissions on a "
                 "computer that is not connected to the internet, so it can take days before they answer.")),
        tags.p(_("Come back in a few days with your codename to read their replies. You can also send more at "
                 "any time.")),
        tags.p(_("When you are done, log out and close Tor Browser.")),
    )


def received(ctx: PageContext, what_arrived: str, first: bool, next_form: str) -> Tag:
    """What one form delivered: the answer to it, and what Back or a reload of its page shows."""
    _ = ctx._
    body: list[Any] = [tags.h1(what_arrived, id="received")]
    if first:
        body.append(_what_happens_next(ctx))
    body.append(tags.p(tags.a(_("Send more and read replies"), href=f"/lookup?form={next_form}", class_="button")))
    return _frame(ctx, what_arrived, body)


def _submission_form(ctx: PageContext, message: str, error: str | None, form_token: str = "") -> Tag:
    _ = ctx._
    section = tags.section(class_="card", **{"aria-labelledby": "send"})(
        tags.h2(_("Send a message or files"), id="send"),
        _paragraphs(ctx.custom.instructions) if ctx.custom.instructions else "",
        _error(error),
    )
    form = tags.form(method="post", action="/submit", enctype="multipart/form-data", id=SUBMISSION_FORM[0])(
        # First in the body, so the server knows the request is genuine before any file arrives.
        _csrf(ctx),
        tags.input(type="hidden", name=FORM_TOKEN_FIELD, value=form_token) if form_token else "",
        tags.div(class_="honey", **{"aria-hidden": "true"})(
            tags.label(_("Leave this field empty"), for_=HONEYPOT_FIELD),
            tags.input(type="text", name=HONEYPOT_FIELD, id=HONEYPOT_FIELD, tabindex="-1", autocomplete="off"),
        ),
        tags.label(_("Message"), for_="msg"),
        # autocomplete off: a browser does not put a sent message back in the box on Back.
        tags.textarea(message, name="msg", id="msg", maxlength=str(MAX_MESSAGE_CHARS), autocomplete="off",
                      dir="auto", **{"aria-describedby": "limits"}),
    )
    if ctx.allow_uploads:
        form(
            tags.label(_("Files"), for_="fh"),
            tags.input(type="file", name="fh", id="fh", multiple=""),
            tags.p(_("Remove hidden information (metadata) from documents before you send them."), ctx.lang.space,
                   _(FILES_STAY_BEHIND), class_="hint"),
        )
    form(
        tags.p(_limits(ctx), id="limits", class_="hint"),
        tags.div(class_="actions")(tags.button(_("Send"), type="submit")),
    )
    return section(form)


@dataclass(frozen=True)
class DeskOption:
    """A desk as the choice page shows it, in the page's language."""

    uuid: str
    name: str
    description: str
    members: int  # how many journalists read it
    member_names: tuple[str, ...]  # only if the desk shows them to sources
    chosen: bool  # the source's messages go there already (it cannot be taken away)


_READ_BY = Counted((Np_("Read by {n} person.", "Read by {n} people."), "count"))


def desk_choice(ctx: PageContext, options: list[DeskOption], error: str | None = None,
                notice: str | None = None, carried: str = "", form_token: str | None = None) -> Tag:
    """The desks a source chooses among (issue 29): name, description, and how many read each
    (their names only where the desk shows them). Already chosen ones stay ticked and cannot be
    unticked: what was sent stays where it was sent. ``carried``: a message refused for want of a
    choice, in the form (on its submission form's token, ``form_token``) to come back after it."""
    _ = ctx._
    items = []
    for i, desk in enumerate(options, 1):
        box = tags.input(type="checkbox", name="desk", value=desk.uuid, id=f"desk-{i}",
                         **{"aria-describedby": f"desk-{i}-about"})
        if desk.chosen:
            box(checked="", disabled="")
        readers: list[Any] = [tags.p(_(_READ_BY, count=desk.members), class_="hint")]
        if desk.member_names:
            readers = [tags.p(_("Read by:"), class_="hint"),
                       tags.ul(*(tags.li(name, dir="auto") for name in desk.member_names), class_="hint")]
        items.append(tags.div(class_="desk card")(
            box, tags.label(desk.name, for_=f"desk-{i}", dir="auto"),
            tags.div(id=f"desk-{i}-about", class_="about")(
                tags.p(desk.description, dir="auto") if desk.description else "",
                *readers,
                tags.p(_("Your messages already go here."), class_="hint") if desk.chosen else "",
            ),
        ))
    actions: list[Any] = []
    if not all(d.chosen for d in options):
        actions.append(tags.button(_("Save my choice"), type="submit"))
    if any(d.chosen for d in options):
        actions.append(tags.a(_("Back to your page"), href="/lookup"))
    return _frame(ctx, _("Choose who reads your messages"), [
        tags.h1(_("Choose who reads your messages")),
        tags.p(notice, class_="flash flash-warning", role="status") if notice else "",
        _error(error),
        tags.p(_("Our newsroom has several desks. Each desk is a team with its own key: only the desks you choose "
                 "can read what you send.")),
        tags.p(_("You can add a desk later, but not remove one: what you send stays with the desks it was sent "
                 "to.")),
        tags.form(method="post", action="/desks", id=DESK_FORM[0])(
            _csrf(ctx),
            tags.fieldset(class_="desks")(tags.legend(_("Desks")), *items),
            *_kept_message(ctx, carried, form_token),
            tags.div(class_="actions")(*actions),
        ),
    ], desks_panel=False, carry=DESK_FORM if carried else None)


def _kept_message(ctx: PageContext, carried: str, form_token: str | None) -> list[Any]:
    """A message carried through a form it was not typed in, in a box of that form."""
    if not carried:
        return []
    return [tags.input(type="hidden", name=FORM_TOKEN_FIELD, value=form_token) if form_token else "",
            tags.label(ctx._("Your message, kept for you"), for_="msg"),
            tags.textarea(carried, name="msg", id="msg", maxlength=str(MAX_MESSAGE_CHARS), dir="auto")]


def logged_out(ctx: PageContext) -> Tag:
    _ = ctx._
    return _frame(ctx, _("Logged out"), [
        tags.h1(_("You are logged out")),
        tags.p(_("To finish, close Tor Browser or choose New Identity in its menu, so nothing of this visit "
                 "stays on this computer.")),
        tags.p(tags.a(_("Back to the start"), href="/")),
    ])


def error(ctx: PageContext, title: str, message: str, back: str | None = None, kept: str = "") -> Tag:
    """A page for a problem that has no form to show again; the frame keeps menu and Log out.
    ``kept``: what the source had typed, shown read-only so that it can be copied, not lost."""
    link = tags.a(ctx._("Back to your page"), href="/lookup") if ctx.logged_in else tags.a(ctx._("Back to the start"), href="/")
    kept_part: Any = ""
    if kept:
        kept_part = tags.p(
            tags.label(ctx._("Your message, kept for you"), for_="msg"),
            tags.textarea(kept, id="msg", readonly="readonly", dir="auto"),
        )
    return _frame(ctx, title, [tags.h1(title), tags.p(message), kept_part, tags.p(back) if back else "", tags.p(link)],
                  body_class="error")
