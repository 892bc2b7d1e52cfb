"""The source interface's languages: complete catalogs, compiled catalogs in step, negotiation."""
from __future__ import annotations

import dataclasses
import gettext
import io
import os
import re
import shutil
import subprocess
import sys

from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from twisted.trial import unittest

from deaddrop.i18n import catalogs
from deaddrop.web.source import i18n
from deaddrop.web.source._browser import is_tor_browser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PLACEHOLDER = re.compile(r"\{\w+\}")


def used_messages() -> dict[str | tuple[str, str], str]:
    """Every message id the source interface's code uses -> where (file:line), read from the
    code itself with Babel's extractor and the same mapping as ``scripts/i18n extract``."""
    found: dict = {}
    for filename, lineno, message, _comments, _context in extract_from_dir(
            os.path.join(ROOT, "deaddrop", "web", "source"), method_map=[("**.py", "python")],
            keywords={**DEFAULT_KEYWORDS, "Np_": (1, 2)}):
        found.setdefault(message, f"{filename}:{lineno}")
    return found


def _catalog(code: str):
    path = os.path.join(i18n.LOCALE_DIR, code, "LC_MESSAGES", "messages.po")
    with open(path, "rb") as f:
        return read_po(f, locale=code)


class CatalogTests(unittest.TestCase):
    def test_the_code_uses_messages(self):
        """The extractor sees the code's strings (so the checks below are not vacuous)."""
        used = used_messages()
        self.assertGreater(len(used), 100)
        self.assertIn("How to stay safe", used)
        self.assertIn("The drop box is busy. Nothing was lost; please try again in a minute.", used)
        self.assertIn(("{n} new reply", "{n} new replies"), used)

    def test_the_template_holds_every_message_the_code_uses(self):
        """``scripts/i18n extract`` was run: the checks below go by the template."""
        template = catalogs.template()
        held = {m.id if isinstance(m.id, str) else tuple(m.id) for m in template if m.id}
        self.assertEqual(set(used_messages()) - held, set(), "run scripts/i18n extract")

    def test_every_shipped_language_translates_every_message_and_keeps_what_it_must(self):
        """No msgid left untranslated in a language not marked incomplete; in every catalog,
        placeholders, markup, addresses and plural forms as the English has them
        (``catalogs.problems``: the checks ``scripts/i18n check`` prints)."""
        template = catalogs.template()
        found = []
        for code in catalogs.catalog_codes():
            found += [f"{code}: {p}" for p in catalogs.problems(_catalog(code), template,
                                                                 complete=catalogs.must_be_complete(code))]
        self.assertEqual(found, [], "\n".join(found))
        self.assertEqual(set(i18n.TRANSLATED) - set(catalogs.catalog_codes()), set(), "a shipped language has no .po")

    def test_compiled_catalogs_match_their_sources(self):
        """The committed .mo files are what ``scripts/i18n compile`` makes of the .po files."""
        for code in i18n.TRANSLATED:
            compiled = io.BytesIO()
            write_mo(compiled, _catalog(code), use_fuzzy=False)
            compiled.seek(0)
            expected = gettext.GNUTranslations(compiled)._catalog
            path = os.path.join(i18n.LOCALE_DIR, code, "LC_MESSAGES", "messages.mo")
            with open(path, "rb") as f:
                committed = gettext.GNUTranslations(f)._catalog
            self.assertEqual(committed, expected, f"{code}: run scripts/i18n compile")

    def test_the_codename_word_is_the_same_throughout_each_language(self):
        """The word for "codename" (as on the generate page) appears wherever English says codename."""
        word = {"es": "nombre en clave", "fr": "nom de code", "de": "codename", "pt": "nome de código",
                "ru": "кодов", "tr": "kod ad", "ar": "اسم", "fa": "نام رمز", "it": "in codice", "nl": "codenaam",
                "pl": "kryptonim", "uk": "кодов", "id": "nama sandi", "vi": "mật danh", "sw": "siri",
                "hi": "कोड नाम", "bn": "কোড নাম", "my": "ကုဒ်အမည်", "zh_Hans": "代号", "zh_Hant": "代號", "ko": "코드명",
                "he": "קוד", "ur": "کوڈ نام"}
        for code in i18n.TRANSLATED:
            self.assertIn(code, word, f"add {code}'s word for codename (as on the generate page) to this table")
            catalog = _catalog(code)
            for message in catalog:
                if not message.id or isinstance(message.id, tuple) or "codename" not in message.id.lower():
                    continue
                self.assertIn(word[code], message.string.lower(), f"{code}: {message.string!r}")

    def test_every_language_says_the_codename_words_stay_english(self):
        key = ("The codename words are English words, whatever language you use here. Capital letters "
               "do not matter, and spaces, commas, hyphens, dots or new lines may separate the words.")
        self.assertIn(key, used_messages())
        for code in i18n.TRANSLATED:
            self.assertTrue(_catalog(code).get(key).string)

    def test_each_language_goes_in_its_scripts_direction(self):
        """A language's direction is its script's, as CLDR says (Arabic, Farsi: right to left)."""
        from babel import Locale

        for code, (_name, direction) in i18n.LANGUAGES.items():
            self.assertEqual(direction, "rtl" if Locale.parse(code).character_order == "right-to-left" else "ltr", code)
        self.assertLessEqual({"ar", "fa"}, {c for c, (_n, d) in i18n.LANGUAGES.items() if d == "rtl"})


class _FakeRequest:
    def __init__(self, cookie: bytes | None = None, accept: bytes | None = None):
        self.cookie, self.accept = cookie, accept

    def getCookie(self, name):
        return self.cookie if name == b"dd_lang" else None

    def getHeader(self, name):
        return self.accept if name == b"accept-language" else None


class NegotiationTests(unittest.TestCase):
    def test_accept_language(self):
        cases = {
            None: None, "": None, "xx, yy;q=0.5": None,
            "es-MX,es;q=0.9,en;q=0.5": "es", "pt-BR": "pt", "en-US,en;q=0.9,ar;q=0.8": "en",
            "de;q=0.2, fa;q=0.9": "fa", "ar;q=0, fr": "fr", "FR-ca": "fr", "ru;q=bad, tr": "tr",
            "zh-CN, tr;q=0.4, *;q=0.1": "zh_Hans",
            # Chinese by its script, or else by its region.
            "zh": "zh_Hans", "zh-SG": "zh_Hans", "zh-Hans-HK": "zh_Hans", "zh-TW": "zh_Hant", "zh-HK": "zh_Hant",
            "zh-MO,en;q=0.5": "zh_Hant", "zh-Hant": "zh_Hant", "zh_Hant_TW": "zh_Hant", "hi-IN": "hi", "bn-BD": "bn",
            "my": "my", "ko-KR": "ko",
            "it-IT,it;q=0.9": "it", "nl-BE": "nl", "pl": "pl", "uk-UA,ru;q=0.5": "uk", "id-ID": "id", "vi": "vi",
            "sw-KE,en;q=0.5": "sw",
            # Codes ISO 639 withdrew, which browsers may still send.
            "in": "id", "iw": "he", "he-IL": "he", "ur-PK,en;q=0.5": "ur",
        }
        for header, expected in cases.items():
            self.assertEqual(i18n.from_accept_language(header), expected, header)

    def test_an_absurd_header_costs_little_and_is_read_only_in_part(self):
        self.assertIsNone(i18n.from_accept_language("xx," * 100_000 + "es"))

    def test_the_menu_cookie_wins_over_the_browser(self):
        self.assertEqual(i18n.negotiate(_FakeRequest(b"fa", b"de")).code, "fa")
        self.assertEqual(i18n.negotiate(_FakeRequest(None, b"de")).code, "de")
        self.assertEqual(i18n.negotiate(_FakeRequest(b"../../etc", b"de")).code, "de")
        self.assertEqual(i18n.negotiate(_FakeRequest(None, None)).code, "en")

    def test_translations_are_used(self):
        self.assertEqual(i18n.language("es").gettext("Log out"), "Cerrar sesión")
        self.assertEqual(i18n.language("ar").direction, "rtl")
        self.assertEqual(i18n.language("ru").ngettext("{n} new reply", "{n} new replies", 5), "{n} новых ответов")
        self.assertEqual(i18n.language("en").gettext("Log out"), "Log out")


class TorBrowserTests(unittest.TestCase):
    TOR_BROWSER = [
        "Mozilla/5.0 (Windows NT 10.0; rv:128.0) Gecko/20100101 Firefox/128.0",
        "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:115.0) Gecko/20100101 Firefox/115.0",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:109.0) Gecko/20100101 Firefox/115.0",
        "Mozilla/5.0 (Android 10; Mobile; rv:128.0) Gecko/128.0 Firefox/128.0",
    ]
    OTHERS = [
        None, "", "curl/8.5.0",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/17.5 Mobile/15E148 Safari/604.1",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 "
        "Safari/537.36 Edg/131.0.0.0",
        "Mozilla/5.0 (Android 14; Mobile; rv:128.0) Gecko/128.0 Firefox/128.0",  # Firefox: real Android version
        "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0 Extra",
    ]

    def test_tor_browser_user_agents(self):
        for ua in self.TOR_BROWSER:
            self.assertTrue(is_tor_browser(ua), ua)
            self.assertTrue(is_tor_browser(ua.encode()), ua)

    def test_other_user_agents(self):
        for ua in self.OTHERS:
            self.assertFalse(is_tor_browser(ua), ua)


class ArabicPluralTests(unittest.TestCase):
    """Issue 17 §7: Arabic counts follow Babel's plural rule (six forms), and one and two are said
    in words ("5 دقيقة" and "و1 مستند" were wrong)."""

    def test_the_catalogs_plural_rule_is_babels(self):
        from babel.messages.plurals import get_plural

        for code in i18n.TRANSLATED:
            rule = get_plural(code)
            catalog = _catalog(code)
            self.assertEqual((catalog.num_plurals, catalog.plural_expr), (rule.num_plurals, rule.plural_expr), code)
        self.assertEqual(get_plural("ar").num_plurals, 6)

    def test_one_and_two_documents_and_replies_in_arabic(self):
        from deaddrop.web.source import messages

        ar = i18n.language("ar")
        self.assertEqual(messages.received(ar, True, 1), "شكرًا لك. وصلتنا رسالتك ومستند واحد.")
        self.assertEqual(messages.received(ar, True, 2), "شكرًا لك. وصلتنا رسالتك ومستندان.")
        self.assertEqual(messages.received(ar, False, 11), "شكرًا لك. وصلنا 11 مستندًا.")
        self.assertEqual(ar.ngettext("{n} new reply", "{n} new replies", 1).format(n=1), "رد جديد واحد")
        for n in (1, 2):
            self.assertNotIn(str(n), messages.received(ar, True, n))


class CountsTests(unittest.TestCase):
    """Issue 17 §7: every count a source reads goes through the plural forms of its language."""

    # Placeholders that stand for a count; "{n} MB" is a unit symbol, not inflected in any of
    # the nine languages (MB, Mo, МБ, ميغابايت, مگابایت...), and "{limit}" follows a noun already said.
    COUNTS = {"{n}", "{count}", "{minutes}", "{chars}", "{days}"}

    def test_no_count_is_said_with_a_singular_message(self):
        used = used_messages()
        self.assertIn(("{n} reply deleted.", "{n} replies deleted."), used)
        singular_counts = {m: where for m, where in used.items()
                           if isinstance(m, str) and m != "{n} MB" and set(_PLACEHOLDER.findall(m)) & self.COUNTS}
        self.assertEqual(singular_counts, {})

    def test_minutes_characters_days_and_replies_in_arabic(self):
        from deaddrop.web.source import messages, pages

        ar = i18n.language("ar")
        ctx = pages.PageContext(lang=ar, site_name="x")
        said = {n: ctx._(messages.INACTIVE, minutes=n) for n in (1, 2, 5, 11, 100, 120)}
        self.assertIn("بعد دقيقة واحدة من", said[1])
        self.assertIn("بعد دقيقتين من", said[2])
        self.assertIn("بعد 5 دقائق من", said[5])
        self.assertIn("بعد 11 دقيقة من", said[11])
        self.assertIn("بعد 100 دقيقة من", said[100])
        self.assertIn("بعد 120 دقيقة من", said[120])
        self.assertTrue(all(s.endswith("يُرجى تسجيل الدخول مرة أخرى.") for s in said.values()))
        self.assertNotIn("5 دقيقة", said[5])  # the example
        self.assertIn(f"فيها {ctx.number(100_003)} أحرف،", ctx._(messages.TOO_LONG, count=100_003, limit=100_000))
        self.assertIn(f"فيها {ctx.number(100_001)} حرف،", ctx._(messages.TOO_LONG, count=100_001, limit=100_000))
        safety = pages.safety(ctx, 3)
        from deaddrop.web._common.pages import render_sync
        self.assertIn("بعد 3 أيام من وصولها", render_sync(safety).decode())
        self.assertIn("بعد يومين من وصولها", render_sync(pages.safety(ctx, 2)).decode())
        self.assertIn("بعد 30 يومًا من وصولها", render_sync(pages.safety(ctx, 30)).decode())
        self.assertEqual(ctx._(messages.REPLIES_DELETED, count=2), "حُذف ردّان.")
        self.assertEqual(ctx._(messages.REPLIES_DELETED, count=7), "حُذفت 7 ردود.")

    def test_russian_and_the_others_follow_their_rules_too(self):
        from deaddrop.web.source import messages, pages

        ru = pages.PageContext(lang=i18n.language("ru"), site_name="x")
        self.assertIn("через 1 минуту после", ru._(messages.INACTIVE, minutes=1))
        self.assertIn("через 3 минуты после", ru._(messages.INACTIVE, minutes=3))
        self.assertIn("через 120 минут после", ru._(messages.INACTIVE, minutes=120))
        self.assertEqual(ru._(messages.REPLIES_DELETED, count=21), "Удалён 21 ответ.")
        de = pages.PageContext(lang=i18n.language("de"), site_name="x")
        self.assertIn("1 Minute nach", de._(messages.INACTIVE, minutes=1))
        self.assertIn("Dieses Wort steht nicht", de._(messages.NOT_IN_LIST, words="abacsu", count=1))
        self.assertIn("Diese Wörter stehen nicht", de._(messages.NOT_IN_LIST, words="a, b", count=2))
        pl = pages.PageContext(lang=i18n.language("pl"), site_name="x")
        self.assertIn("{n} minutę po".format(n=1), pl._(messages.INACTIVE, minutes=1))
        self.assertIn("22 minuty po", pl._(messages.INACTIVE, minutes=22))
        self.assertIn("25 minut po", pl._(messages.INACTIVE, minutes=25))
        self.assertIn("12 minut po", pl._(messages.INACTIVE, minutes=12))
        uk = pages.PageContext(lang=i18n.language("uk"), site_name="x")
        self.assertIn("через 21 хвилину після", uk._(messages.INACTIVE, minutes=21))
        self.assertIn("через 3 хвилини після", uk._(messages.INACTIVE, minutes=3))
        self.assertIn("через 11 хвилин після", uk._(messages.INACTIVE, minutes=11))
        it = pages.PageContext(lang=i18n.language("it"), site_name="x")
        self.assertIn("1 minuto dopo", it._(messages.INACTIVE, minutes=1))
        self.assertIn("5 minuti dopo", it._(messages.INACTIVE, minutes=5))
        # CLDR's "many" in Italian: "un milione di minuti".
        self.assertIn("1.000.000 di minuti dopo", it._(messages.INACTIVE, minutes=1_000_000))
        # Chinese runs its sentences together; the others put a space between them.
        zh = pages.PageContext(lang=i18n.language("zh_Hans"), site_name="x")
        self.assertIn("自动退出。尚未保存任何内容", zh._(messages.EXPIRED_SUBMIT, minutes=60))
        self.assertIn("的文件。为了您的安全，登录 60 分钟后", pages._limits(dataclasses.replace(zh, session_minutes=60)))
        self.assertIn("nach der Anmeldung abgemeldet. Bitte", de._(messages.INACTIVE, minutes=5))
        en = pages.PageContext(lang=i18n.language("en"), site_name="x")
        self.assertEqual(en._(messages.REPLIES_DELETED, count=1), "1 reply deleted.")
        self.assertEqual(en._(messages.REPLIES_DELETED, count=1200), "1,200 replies deleted.")


class TranslationChecksTests(unittest.TestCase):
    """Issue 31 item 5: what ``scripts/i18n check`` and the catalog test catch, on made-up
    translations (each is a fault a translator's editor would not notice)."""

    def test_placeholders_must_be_kept_exactly(self):
        english = "Your message is too long: it has {n} characters, and the limit is {limit}."
        self.assertEqual(catalogs.form_problems(english, "Trop long : {n} caractères, limite {limit}."), [])
        self.assertEqual(catalogs.form_problems(english, "Limite {limit}, vous avez {n}."), [])  # order is free
        for broken in ("Trop long : {n} caractères.", "Trop long : {nombre} caractères, limite {limit}.",
                       "Trop long : {n} caractères, limite {limit} {limit}.", "Trop long : {n caractères, {limit}.",
                       "Trop long : {n!r} caractères, limite {limit}."):
            self.assertTrue(catalogs.form_problems(english, broken), broken)

    def test_markup_addresses_and_names_must_be_kept(self):
        english = "You can get Tor Browser from torproject.org, or by email from gettor@torproject.org."
        self.assertEqual(catalogs.form_problems(english, "Tor Browser: torproject.org, gettor@torproject.org."), [])
        # Korean and Bengali attach their particles to the address itself.
        self.assertEqual(catalogs.form_problems(english, "Tor 브라우저는 torproject.org에서, gettor@torproject.org로."), [])
        self.assertEqual(catalogs.form_problems(english, "Tor ব্রাউজার torproject.org থেকে, gettor@torproject.org-এ।"), [])
        self.assertTrue(catalogs.form_problems(english, "Tor: torproject.org-mirror.net, gettor@torproject.org."))
        self.assertTrue(catalogs.form_problems(english, "Tor Browser: torprojekt.org, gettor@torproject.org."))
        self.assertTrue(catalogs.form_problems(english, "Tor Browser: torproject.org, getter@torproject.org."))
        self.assertTrue(catalogs.form_problems(english, "Браузер: torproject.org, gettor@torproject.org."))
        self.assertTrue(catalogs.form_problems("Log out", "<b>Abmelden</b>"))
        self.assertTrue(catalogs.form_problems("Log out", "Abmelden &amp; schließen"))
        self.assertTrue(catalogs.form_problems("Powered by DeadDrop", "Betrieben mit TotesFach"))

    def test_a_plural_form_says_its_count_in_words_only_where_it_stands_for_one_number(self):
        from babel.messages.catalog import Catalog

        template = Catalog(locale="en")
        template.add(("{n} new reply", "{n} new replies"))
        arabic, hindi = Catalog(locale="ar"), Catalog(locale="hi")
        arabic.add(("{n} new reply", "{n} new replies"),
                   ("لا ردود جديدة", "رد جديد واحد", "ردان جديدان", "{n} ردود جديدة", "{n} ردًا جديدًا", "{n} رد جديد"))
        self.assertEqual(catalogs.problems(arabic, template, complete=True), [])
        # Hindi's first form stands for 0 and 1 alike: it must keep {n}.
        hindi.add(("{n} new reply", "{n} new replies"), ("एक नया जवाब", "{n} नए जवाब"))
        self.assertEqual(len(catalogs.problems(hindi, template, complete=True)), 1)
        hindi = Catalog(locale="hi")
        hindi.add(("{n} new reply", "{n} new replies"), ("{n} नया जवाब", "{n} नए जवाब"))
        self.assertEqual(catalogs.problems(hindi, template, complete=True), [])

    def test_untranslated_fuzzy_missing_and_wrong_plural_counts_are_found(self):
        from babel.messages.catalog import Catalog

        template = Catalog(locale="en")
        for message in ("Log in", "Log out", "Cancel", ("{n} new reply", "{n} new replies")):
            template.add(message)
        polish = Catalog(locale="pl")
        polish.add("Log in", "Zaloguj się")
        polish.add("Log out", "")
        polish.add("Cancel", "Anuluj", flags=["fuzzy"])
        polish.add(("{n} new reply", "{n} new replies"), ("{n} nowa odpowiedź", "{n} nowe odpowiedzi"))
        found = catalogs.problems(polish, template, complete=True)
        self.assertEqual([line.split(":")[0].split(" (")[0] for line in found],
                         ["not translated", "marked fuzzy", "2 plural forms instead of 3"], found)
        # An incomplete language may leave messages untranslated, never break one.
        self.assertEqual(len(catalogs.problems(polish, template, complete=False)), 2)
        self.assertEqual(catalogs.progress(polish, template), catalogs.Progress(2, 4))


class StatusTableTests(unittest.TestCase):
    """Issue 31 item 4: the README's status table is the one the catalogs make."""

    def test_the_readme_table_is_current(self):
        from deaddrop.i18n import translation_status

        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        self.assertEqual(readme, translation_status.with_table(readme), "run scripts/i18n status")
        table = translation_status.table()
        for code in i18n.TRANSLATED:
            self.assertIn(f"| `{code}` |", table)
        self.assertIn("| Deutsch | German | `de` |", table)

    def test_the_table_says_what_each_file_says(self):
        from deaddrop.i18n import translation_status

        locales = self.mktemp()
        os.makedirs(locales)
        with open(os.path.join(i18n.LOCALE_DIR, "messages.pot"), "rb") as f:
            template = f.read()
        with open(os.path.join(locales, "messages.pot"), "wb") as f:
            f.write(template)
        catalogs.init("am", locales)  # a language that is not in the menu
        path = catalogs.po_path("am", locales)
        catalog = catalogs.read(path, "am")
        catalog.get("Log out").string = "ውጣ"
        catalog.header_comment = catalog.header_comment.replace("review: no", "review: 2027-01-15, Amina")
        from babel.messages.pofile import write_po
        with open(path, "wb") as f:
            write_po(f, catalog)
        total = sum(1 for m in catalogs.template(locales) if m.id)
        row = translation_status.table(locales).splitlines()[-1]
        self.assertEqual(row, f"| አማርኛ | Amharic | `am` | 1 of {total} (0%) | 2027-01-15, Amina "
                              "| not yet (docs/translating.md, step 5) |")


class FallbackTests(unittest.TestCase):
    """Issue 31 item 4: an untranslated message falls back to English, that message only; a
    language shipped incomplete says so in its menu entry, in its own words."""

    def _language_without(self, code: str, *missing: str) -> i18n.Language:
        catalog = _catalog(code)
        for key in missing:
            del catalog[key]
        compiled = io.BytesIO()
        write_mo(compiled, catalog)
        compiled.seek(0)
        real = i18n.language(code)
        return i18n.Language(code, real.name, real.direction, gettext.GNUTranslations(compiled))

    def test_an_untranslated_message_is_shown_in_english_and_only_that_one(self):
        from deaddrop.web._common.pages import render_sync
        from deaddrop.web.source import pages

        lang = self._language_without("de", "Coming back", "Log in")
        html = render_sync(pages.index(pages.PageContext(lang=lang, site_name="X"))).decode()
        self.assertIn(">Coming back<", html)
        self.assertIn(">Log in<", html)
        self.assertIn(">Zum ersten Mal hier<", html)
        self.assertIn("So schützen Sie sich", html)

    def test_a_translation_whose_placeholders_break_falls_back_to_english(self):
        from deaddrop.web.source import pages

        broken = i18n.Language("de", "Deutsch", "ltr", _Translations({"Replies from {name}": "Antworten von {nom}"}))
        ctx = pages.PageContext(lang=broken, site_name="X")
        self.assertEqual(ctx._("Replies from {name}", name="The Paper"), "Replies from The Paper")

    def test_an_incomplete_language_says_so_in_the_menu(self):
        from deaddrop.web._common.pages import render_sync
        from deaddrop.web.source import pages

        self.patch(i18n, "INCOMPLETE", frozenset({"de"}))
        html = render_sync(pages.index(pages.PageContext(lang=i18n.language("en"), site_name="X"))).decode()
        self.assertIn('lang="de" hreflang="de">Deutsch (unvollständig)</a>', html)
        self.assertIn('lang="fr" hreflang="fr">Français</a>', html)
        self.assertEqual(pages.menu_name("de"), "Deutsch (unvollständig)")


class _Translations(gettext.NullTranslations):
    def __init__(self, table: dict[str, str]) -> None:
        super().__init__()
        self.table = table

    def gettext(self, message: str) -> str:
        return self.table.get(message, message)


class TranslatorWorkflowTests(unittest.TestCase):
    """Issue 31 item 4: docs/translating.md, followed for a made-up language (Esperanto, which
    nobody ships here) in a copy of the checkout, from ``init`` to a page in that language."""

    GUIDE = os.path.join(ROOT, "docs", "translating.md")
    EXAMPLE, DUMMY = "am", "eo"  # the guide's example, and the language this test makes
    timeout = 180

    def _copy_of_the_checkout(self) -> str:
        copy = self.mktemp()
        skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        shutil.copytree(os.path.join(ROOT, "deaddrop"), os.path.join(copy, "deaddrop"), ignore=skip)
        shutil.copytree(os.path.join(ROOT, "scripts"), os.path.join(copy, "scripts"), ignore=skip)
        os.makedirs(os.path.join(copy, "tests"))
        os.makedirs(os.path.join(copy, "docs"))
        for name in ("tests/__init__.py", "tests/_event_catalogue.py", "tests/_markdown.py", "tests/test_i18n.py",
                     "docs/monitoring.md", "babel.cfg", "babel-journalist.cfg", "README.md"):
            shutil.copy(os.path.join(ROOT, name), os.path.join(copy, name))
        return copy

    def _follow(self, copy: str, command: str) -> str:
        """A command of the guide, for the dummy language, in the copy. -> what it printed."""
        argv = command.replace(f" {self.EXAMPLE}", f" {self.DUMMY}").split()
        if argv[0] == ".venv/bin/trial":  # the checks of every language (not this class again)
            checks = ("test_the_template_holds_every_message_the_code_uses", "test_compiled_catalogs_match_their_sources",
                      "test_every_shipped_language_translates_every_message_and_keeps_what_it_must",
                      "test_each_language_goes_in_its_scripts_direction")
            argv = [sys.executable, "-m", "twisted.trial", "tests.test_i18n.StatusTableTests.test_the_readme_table_is_current",
                    *(f"tests.test_i18n.CatalogTests.{name}" for name in checks)]
        env = {**os.environ, "PYTHON": sys.executable}
        done = subprocess.run(argv, cwd=copy, env=env, capture_output=True, text=True, timeout=120)
        said = done.stdout + done.stderr
        self.assertEqual(done.returncode, 0, f"{command}:\n{said}")
        return said

    def _translate(self, path: str) -> int:
        """Step 2, as a translator would (every message, plural forms too). -> how many."""
        from babel.messages.pofile import write_po

        catalog = catalogs.read(path, self.DUMMY)
        for message in catalog:
            if message.id:
                ids = message.id if isinstance(message.id, tuple) else (message.id,)
                forms = [f"⟦{ids[min(i, len(ids) - 1)]}⟧" for i in range(catalog.num_plurals)]
                message.string = tuple(forms) if isinstance(message.id, tuple) else forms[0]
        with open(path, "wb") as f:
            write_po(f, catalog, no_location=True)
        return sum(1 for m in catalog if m.id)

    def test_the_guide_takes_a_new_language_from_nothing_to_shipped(self):
        with open(self.GUIDE, encoding="utf-8") as f:
            guide = f.read()
        commands = [line for block in re.findall(r"```sh\n(.*?)```", guide, re.S) for line in block.splitlines()]
        self.assertEqual(commands, ["scripts/i18n init am", "scripts/i18n check am", "scripts/i18n compile",
                                    "scripts/i18n compile", ".venv/bin/trial tests.test_i18n",
                                    "scripts/i18n extract"])
        [entry] = re.findall(r"```python\n(.*?)\n```", guide, re.S)
        copy = self._copy_of_the_checkout()
        po = catalogs.po_path(self.DUMMY, os.path.join(copy, "deaddrop", "web", "source", "locales"))

        self._follow(copy, commands[0])  # 1. start the language
        self.assertTrue(os.path.exists(po))
        total = self._translate(po)  # 2. translate
        said = self._follow(copy, commands[1])  # 3. check
        self.assertIn(f"{self.DUMMY}: {total} of {total} messages translated (100%), no problems", said)
        self._follow(copy, commands[2])  # 4. compile
        self.assertTrue(os.path.exists(po[:-2] + "mo"))
        row = f"| `{self.DUMMY}` | {total} of {total} (100%) | not yet | not yet (docs/translating.md, step 5) |"
        self.assertIn(row, self._readme(copy))
        self._ship(copy, entry)  # 5. ship it: the line in deaddrop/newsroom/languages.py
        self._follow(copy, commands[3])
        self.assertIn(f"| `{self.DUMMY}` | {total} of {total} (100%) | not yet | yes |", self._readme(copy))
        self._follow(copy, commands[4])
        page = self._index_page(copy)
        self.assertIn(f'<html lang="{self.DUMMY}" dir="ltr">', page)
        self.assertIn("⟦How to stay safe⟧", page)
        self.assertIn(f'hreflang="{self.DUMMY}" aria-current="true">Esperanto</a>', page)

        # When the pages change: a new message reaches the file untranslated, and the checks say so.
        source = os.path.join(copy, "deaddrop", "web", "source", "messages.py")
        with open(source, "a", encoding="utf-8") as f:
            f.write('\nADDED = N_("A message added after the translation.")\n')
        self._follow(copy, commands[5])
        done = subprocess.run([sys.executable, "-m", "deaddrop.i18n.catalogs", "check", self.DUMMY], cwd=copy,
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 1)
        self.assertIn("not translated: 'A message added after the translation.'", done.stdout)

    def test_the_guide_starts_checks_and_compiles_a_journalist_catalogue(self):
        """Its section "The journalist interface": the same commands, the word ``journalist``
        added to ``init``; the README's second table then counts the new catalogue."""
        with open(self.GUIDE, encoding="utf-8") as f:
            guide = f.read()
        self.assertIn(f"`scripts/i18n init {self.EXAMPLE} journalist`", guide)
        copy = self._copy_of_the_checkout()
        po = catalogs.po_path(self.DUMMY, os.path.join(copy, "deaddrop", "web", "journalist", "locales"))
        self._follow(copy, f"scripts/i18n init {self.EXAMPLE} journalist")
        self.assertTrue(os.path.exists(po))
        self.assertFalse(os.path.exists(catalogs.po_path(self.DUMMY, os.path.join(copy, "deaddrop", "web", "source",
                                                                                   "locales"))))
        total = self._translate(po)
        said = self._follow(copy, f"scripts/i18n check {self.EXAMPLE}")
        self.assertIn(f"journalist {self.DUMMY}: {total} of {total} messages translated (100%), no problems", said)
        self._follow(copy, "scripts/i18n compile")
        self.assertTrue(os.path.exists(po[:-2] + "mo"))
        journalist_table = self._readme(copy).split("**The journalist interface")[1]
        self.assertIn(f"| `{self.DUMMY}` | {total} of {total} (100%) | not yet | not yet (docs/translating.md, step 5) |",
                      journalist_table)

    def _ship(self, copy: str, entry: str) -> None:
        path = os.path.join(copy, "deaddrop", "newsroom", "languages.py")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        line = entry.replace(f'"{self.EXAMPLE}"', f'"{self.DUMMY}"').replace("አማርኛ", "Esperanto")
        last = text.index("\n}\n", text.index("LANGUAGES"))  # after the last language listed
        with open(path, "w", encoding="utf-8") as f:
            f.write(text[:last] + "\n" + line + text[last:])

    def _readme(self, copy: str) -> str:
        with open(os.path.join(copy, "README.md"), encoding="utf-8") as f:
            return f.read()

    def _index_page(self, copy: str) -> str:
        render = ("from deaddrop.web._common.pages import render_sync; from deaddrop.web.source import i18n, pages; "
                  f"print(render_sync(pages.index(pages.PageContext(lang=i18n.language({self.DUMMY!r}), "
                  "site_name='X'))).decode())")
        done = subprocess.run([sys.executable, "-c", render], cwd=copy, capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done.stdout


class ScriptsTests(unittest.TestCase):
    """Issue 31 item 2: nothing in the pages' CSS or markup stands in the way of a script."""

    STYLESHEET = os.path.join(ROOT, "deaddrop", "web", "static", "style.css")

    def test_the_stylesheet_uses_logical_properties_and_nothing_that_breaks_a_script(self):
        with open(self.STYLESHEET, encoding="utf-8") as f:
            css = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
        physical = re.findall(r"(?:margin|padding|border)-(?:left|right)\b|(?<![\w-])(?:left|right)\s*:"
                              r"|text-align\s*:\s*(?:left|right)|float\s*:\s*(?:left|right)", css)
        self.assertEqual(physical, [], "use logical properties (margin-inline-start, text-align: start...)")
        # letter-spacing breaks Arabic joining; text-transform and word-break: break-all change
        # or cut words in scripts they were not made for; a web font would load from the page.
        for breaking in ("letter-spacing", "text-transform", "break-all", "@font-face", "url("):
            self.assertNotIn(breaking, css)

    def test_the_document_and_everything_a_source_types_carry_a_direction(self):
        from deaddrop.web._common.pages import render_sync
        from deaddrop.web.source import pages

        for code in ("ar", "fa", "en"):
            ctx = pages.PageContext(lang=i18n.language(code), site_name="X", csrf_token="t")
            name, direction = i18n.LANGUAGES[code]
            for page in (pages.lookup(ctx, [], message="typed"), pages.login(ctx, carried="typed", codename="a b"),
                         pages.error(ctx, "t", "m", kept="typed")):
                html = render_sync(page).decode()
                self.assertIn(f'<html lang="{code}" dir="{direction}">', html)
                for textarea in re.findall(r"<textarea[^>]*>", html):
                    # The codename is English words, left to right; a message is whatever was typed.
                    wanted = 'dir="ltr"' if 'id="codename"' in textarea else 'dir="auto"'
                    self.assertIn(wanted, textarea)
