"""Issue 31 item 3: the journalist interface's catalogue (its pages, flashes, errors and digest
mail) is whole in every language it ships, keeps what it must, and no visible English is left
in its code outside a translation call."""
from __future__ import annotations

import ast
import gettext
import io
import os

from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_dir
from babel.messages.mofile import write_mo
from twisted.trial import unittest

from deaddrop.i18n import catalogs
from deaddrop.newsroom.languages import JOURNALIST_LANGUAGES, LANGUAGES
from deaddrop.web.journalist import i18n

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JOURNALIST = catalogs.JOURNALIST
# Where the journalist catalogue's messages come from (babel-journalist.cfg says the same).
_CODE = [(os.path.join(ROOT, "deaddrop", "web", "journalist"), "**.py"), (os.path.join(ROOT, "deaddrop", "digest"), "mail.py")]
# Attributes read out to a reader: their text must be translated too.
_READ_OUT = {"title", "placeholder", "alt", "aria-label", "aria_label"}
# Text that is not words of a language: marks, punctuation, codes.
_NOT_WORDS = {"★ ", " (", ")", ", ", "; ", " ", "?"}


def used_messages() -> dict:
    """Every message id the journalist code and the digest mail use -> where (file:line), read
    with Babel's extractor and the keywords ``scripts/i18n extract`` gives it."""
    found: dict = {}
    for folder, pattern in _CODE:
        for filename, lineno, message, _c, _x in extract_from_dir(
                folder, method_map=[(pattern, "python")], keywords={**DEFAULT_KEYWORDS, "n_": (1, 2), "Np_": (1, 2)}):
            found.setdefault(message, f"{filename}:{lineno}")
    return found


def _catalog(code: str):
    return catalogs.read(catalogs.po_path(code, JOURNALIST.locale_dir), code)


def visible_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of words written straight into a page, a flash or an error, without a
    translation call: a string (or f-string) given to ``tags.x(...)`` as content or as an
    attribute read out, to ``.flash(...)``, or as an error's title or message."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        tag = func.func if isinstance(func, ast.Call) else func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if isinstance(tag, ast.Attribute) and isinstance(tag.value, ast.Name) and tag.value.id == "tags":
            texts = list(node.args) + [k.value for k in node.keywords if k.arg in _READ_OUT]
            texts += [v for k in node.keywords if k.arg is None and isinstance(k.value, ast.Dict)
                      for key, v in zip(k.value.keys, k.value.values)
                      if isinstance(key, ast.Constant) and key.value in _READ_OUT]
        elif name == "flash":
            texts = node.args[:1]
        elif name == "error" and len(node.args) >= 4:
            texts = node.args[2:4]
        else:
            continue
        for text in texts:
            for part in (text.body, text.orelse) if isinstance(text, ast.IfExp) else (text,):
                if isinstance(part, ast.JoinedStr) or (
                        isinstance(part, ast.Constant) and isinstance(part.value, str)
                        and any(c.isalpha() for c in part.value) and part.value not in _NOT_WORDS):
                    found.append((part.lineno, ast.unparse(part)))
    return found


class JournalistCatalogueTests(unittest.TestCase):
    def test_the_code_uses_messages(self):
        used = used_messages()
        self.assertGreater(len(used), 250)
        self.assertIn("Sources", used)
        self.assertIn(("{n} message", "{n} messages"), used)
        self.assertIn("Since the last digest:", used)  # the digest mail
        self.assertIn("Touch your security key now.", used)  # the security key script's words

    def test_the_template_holds_every_message_the_code_uses(self):
        template = catalogs.template(JOURNALIST.locale_dir)
        held = {m.id if isinstance(m.id, str) else tuple(m.id) for m in template if m.id}
        self.assertEqual(set(used_messages()) - held, set(), "run scripts/i18n extract")

    def test_every_shipped_language_translates_every_message_and_keeps_its_placeholders(self):
        """No msgid untranslated (or fuzzy) in a shipped language not marked incomplete;
        placeholders, markup and plural forms as the English has them, in every catalog."""
        template = catalogs.template(JOURNALIST.locale_dir)
        found = []
        for code in catalogs.catalog_codes(JOURNALIST.locale_dir):
            found += [f"{code}: {p}" for p in catalogs.problems(
                _catalog(code), template, complete=catalogs.must_be_complete(code, JOURNALIST))]
        self.assertEqual(found, [], "\n".join(found))
        shipped = set(JOURNALIST_LANGUAGES) - {"en"}
        self.assertEqual(shipped - set(catalogs.catalog_codes(JOURNALIST.locale_dir)), set(),
                         "a shipped journalist language has no .po")

    def test_compiled_catalogs_match_their_sources(self):
        for code in set(JOURNALIST_LANGUAGES) - {"en"}:
            compiled = io.BytesIO()
            write_mo(compiled, _catalog(code), use_fuzzy=False)
            compiled.seek(0)
            expected = gettext.GNUTranslations(compiled)._catalog
            with open(catalogs.po_path(code, JOURNALIST.locale_dir)[:-2] + "mo", "rb") as f:
                self.assertEqual(gettext.GNUTranslations(f)._catalog, expected, f"{code}: run scripts/i18n compile")

    def test_the_journalist_languages_are_source_languages_with_their_direction(self):
        self.assertEqual(JOURNALIST_LANGUAGES[0], "en")
        self.assertLessEqual(set(JOURNALIST_LANGUAGES), set(LANGUAGES))
        for code in JOURNALIST_LANGUAGES:
            self.assertEqual(i18n.speech(code).direction, LANGUAGES[code][1])

    def test_no_visible_english_is_written_outside_a_translation_call(self):
        found = []
        folder = os.path.join(ROOT, "deaddrop", "web", "journalist")
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    found += [f"{name}:{line}: {text}" for line, text in visible_literals(f.read())]
        self.assertEqual(found, [], "wrap these in _() (see deaddrop/web/journalist/i18n.py):\n" + "\n".join(found))

    def test_the_finder_finds_what_it_looks_for(self):
        code = ('tags.p("Hello there")\ntags.p(_("Fine"))\nsession.flash(f"Deleted {n}.", "ok")\n'
                'tags.td("★ ", **{"aria-label": "select it"})\nself.error(request, 404, "Not found", N_("x"))\n'
                'tags.button("Star" if a else _("Unstar"))\ntags.input(type="hidden", value="1")\n')
        self.assertEqual([line for line, _text in visible_literals(code)], [1, 3, 4, 5, 6])


class MissingCertificatePageTests(unittest.TestCase):
    def test_the_page_without_a_certificate_speaks_the_browser_s_language(self):
        from twisted.web.http_headers import Headers

        from deaddrop.web.journalist import gate

        page = gate.missing_cert_page(i18n.browser_language(Headers({b"accept-language": [b"ar-EG,en;q=0.5"]})))
        self.assertIn('<html lang="ar" dir="rtl">', page.decode())
        self.assertIn("يلزم شهادة غرفة الأخبار", page.decode())
        self.assertIn("<code>.p12</code>", page.decode())
        self.assertEqual(gate.missing_cert_page("en"), gate.MISSING_CERT_PAGE)
        self.assertIn("Newsroom certificate needed", gate.MISSING_CERT_PAGE.decode())


def _shared_english() -> set[str]:
    """The English the shared web layer answers with before (or instead of) a journalist route:
    its early refusals, routing errors and upload refusals, read from its code."""
    found: set[str] = set()
    for name in ("site.py", "pages.py", "upload.py"):
        with open(os.path.join(ROOT, "deaddrop", "web", "_common", name), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called in ("_refuse_early", "render_error_page", "refuse", "UploadError"):
                    found |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
            elif isinstance(node, ast.FunctionDef) and node.name == "http_error_page_text":
                found |= {c.value for ret in ast.walk(node) if isinstance(ret, ast.Return)
                          for c in ast.walk(ret) if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return {text for text in found if any(ch.isalpha() for ch in text) and not text.startswith("werkzeug")}


class SharedRefusalsTests(unittest.TestCase):
    def test_every_refusal_the_shared_layer_answers_with_is_in_the_journalist_catalogue(self):
        from deaddrop.web.journalist import messages

        listed = set(messages.EARLY) | set(messages.ROUTING) | set(messages.UPLOAD)
        shared = _shared_english()
        self.assertIn("Too many requests", shared)
        self.assertIn("That action is not available this way.", shared)
        self.assertIn("Unexpected form field.", shared)
        self.assertEqual(shared - listed, set(), "add these to deaddrop/web/journalist/messages.py")
        held = {m.id for m in catalogs.template(JOURNALIST.locale_dir) if m.id}
        self.assertEqual(listed - held, set())
