"""Coding tasks with hidden tests, written for this project: the multi-file bookshop and small one-file tasks.

A :class:`CodingTask` is a user specification (what L2MAC receives), a reference implementation by
module and function, and hidden tests that score a generated codebase (Features %: the share of
hidden tests that pass, as in the paper). Each reference function also carries one plausible bug
(a fragment and its faulty replacement): the simulated coder of :mod:`iclr24.l2mac.simulated`
writes it with that bug at a given rate and fixes it when a failing test names the function.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from iclr24.sandbox.calls import Call, Expect, Get, Let, Ref

__all__ = ["BOOKSHOP", "CodingTask", "Function", "Module", "ONE_STEP_TASKS"]


@dataclass(frozen=True)
class Function:
    """One function of the reference: its ``source``, a ``bug`` (fragment, faulty fragment) and the coder's tests."""

    name: str
    source: str
    bug: tuple[str, str]
    tests: str

    def __post_init__(self) -> None:
        if self.source.count(self.bug[0]) != 1:
            raise ValueError(f"{self.name}: the bug's fragment {self.bug[0]!r} must occur once in its source")


@dataclass(frozen=True)
class Module:
    name: str  # file name, e.g. "catalog.py"
    doc: str
    imports: str
    functions: tuple[Function, ...]

    @property
    def test_file(self) -> str:
        return f"test_{self.name}"


@dataclass(frozen=True)
class CodingTask:
    """A coding task: its spec, the reference modules (for the simulated coder) and the hidden tests, both as
    pytest files (``hidden_tests``, for reading) and as call scripts (``hidden_cases``: file -> test -> steps,
    each step a (Call/Get/Let, Expect) pair), which is how a codebase is scored."""

    name: str
    spec: str
    modules: tuple[Module, ...] = ()
    hidden_tests: dict[str, str] = field(default_factory=dict)
    hidden_cases: dict[str, dict[str, tuple]] = field(default_factory=dict)

    @property
    def functions(self) -> list[Function]:
        return [f for m in self.modules for f in m.functions]


def _f(name: str, source: str, bug: tuple[str, str], tests: str) -> Function:
    return Function(name, source.strip("\n") + "\n", bug, tests.strip("\n") + "\n")


CATALOG = Module("catalog.py", "The book catalogue: books by ISBN.", "", (
    _f("add_book", '''
def add_book(catalog, isbn, title, author, price):
    """Add a book to ``catalog`` (a dict keyed by ISBN) and return the catalogue.

    The ISBN must be new and the price must not be negative; otherwise a ValueError is raised.
    """
    if isbn in catalog:
        raise ValueError(f"ISBN {isbn} is already in the catalogue")
    if price < 0:
        raise ValueError(f"price must not be negative, got {price}")
    catalog[isbn] = {"title": title, "author": author, "price": price}
    return catalog
''', ("if price < 0:", "if price < -1:"), '''
def test_add_book():
    catalog = add_book({}, "1", "Dune", "Herbert", 9.5)
    assert catalog["1"] == {"title": "Dune", "author": "Herbert", "price": 9.5}
    with pytest.raises(ValueError):
        add_book(catalog, "1", "Dune", "Herbert", 9.5)
    with pytest.raises(ValueError):
        add_book(catalog, "2", "Emma", "Austen", -0.5)
'''),
    _f("find_by_author", '''
def find_by_author(catalog, author):
    """The ISBNs of every book by ``author`` (case-insensitive), sorted."""
    wanted = author.lower()
    return sorted(isbn for isbn, book in catalog.items() if book["author"].lower() == wanted)
''', ("if book[\"author\"].lower() == wanted", "if book[\"author\"] == author"), '''
def test_find_by_author():
    catalog = {"2": {"title": "B", "author": "Le Guin", "price": 1},
               "1": {"title": "A", "author": "le guin", "price": 2},
               "3": {"title": "C", "author": "Other", "price": 3}}
    assert find_by_author(catalog, "LE GUIN") == ["1", "2"]
'''),
    _f("price_of", '''
def price_of(catalog, isbn):
    """The price of the book ``isbn``; a KeyError naming the ISBN when it is not in the catalogue."""
    if isbn not in catalog:
        raise KeyError(f"unknown ISBN {isbn}")
    return catalog[isbn]["price"]
''', ('return catalog[isbn]["price"]', 'return catalog[isbn].get("cost", 0)'), '''
def test_price_of():
    assert price_of({"1": {"title": "A", "author": "B", "price": 4.0}}, "1") == 4.0
    with pytest.raises(KeyError):
        price_of({}, "9")
'''),
))

CART = Module("cart.py", "The shopping cart: quantities by ISBN.", "from catalog import price_of\n", (
    _f("add_to_cart", '''
def add_to_cart(cart, isbn, quantity=1):
    """Add ``quantity`` copies of ``isbn`` to ``cart`` (a dict ISBN -> quantity) and return it.

    The quantity must be a positive integer; otherwise a ValueError is raised.
    """
    if not isinstance(quantity, int) or quantity < 1:
        raise ValueError(f"quantity must be a positive integer, got {quantity!r}")
    cart[isbn] = cart.get(isbn, 0) + quantity
    return cart
''', ("cart[isbn] = cart.get(isbn, 0) + quantity", "cart[isbn] = quantity"), '''
def test_add_to_cart():
    cart = add_to_cart({}, "1", 2)
    assert add_to_cart(cart, "1") == {"1": 3}
    with pytest.raises(ValueError):
        add_to_cart(cart, "1", 0)
'''),
    _f("remove_from_cart", '''
def remove_from_cart(cart, isbn, quantity=1):
    """Remove up to ``quantity`` copies of ``isbn``; the entry goes when none is left. Returns ``cart``."""
    left = cart.get(isbn, 0) - quantity
    if left > 0:
        cart[isbn] = left
    else:
        cart.pop(isbn, None)
    return cart
''', ("if left > 0:", "if left >= 0:"), '''
def test_remove_from_cart():
    assert remove_from_cart({"1": 3}, "1") == {"1": 2}
    assert remove_from_cart({"1": 1}, "1") == {}
    assert remove_from_cart({}, "1") == {}
'''),
    _f("cart_total", '''
def cart_total(cart, catalog):
    """The price of everything in ``cart``, from the prices in ``catalog``, rounded to cents."""
    return round(sum(price_of(catalog, isbn) * quantity for isbn, quantity in cart.items()), 2)
''', ("price_of(catalog, isbn) * quantity", "price_of(catalog, isbn) + quantity"), '''
def test_cart_total():
    catalog = {"1": {"title": "A", "author": "B", "price": 2.5}, "2": {"title": "C", "author": "D", "price": 1.0}}
    assert cart_total({"1": 2, "2": 3}, catalog) == 8.0
    assert cart_total({}, catalog) == 0
'''),
))

PRICING = Module("pricing.py", "Discounts and coupons.", "", (
    _f("apply_percentage", '''
def apply_percentage(total, percent):
    """``total`` less ``percent`` per cent, rounded to cents; the percentage must lie in [0, 100]."""
    if not 0 <= percent <= 100:
        raise ValueError(f"percent must be in [0, 100], got {percent}")
    return round(total * (1 - percent / 100), 2)
''', ("percent / 100", "percent / 10"), '''
def test_apply_percentage():
    assert apply_percentage(200.0, 15) == 170.0
    assert apply_percentage(10.0, 0) == 10.0
    with pytest.raises(ValueError):
        apply_percentage(10.0, 120)
'''),
    _f("bulk_discount", '''
def bulk_discount(quantity, unit_price):
    """The price of ``quantity`` copies: 10% off from 10 copies, 20% off from 50 copies."""
    percent = 20 if quantity >= 50 else 10 if quantity >= 10 else 0
    return round(quantity * unit_price * (1 - percent / 100), 2)
''', ("if quantity >= 10 else 0", "if quantity > 10 else 0"), '''
def test_bulk_discount():
    assert bulk_discount(2, 5.0) == 10.0
    assert bulk_discount(10, 1.0) == 9.0
    assert bulk_discount(50, 1.0) == 40.0
'''),
    _f("coupon_percent", '''
COUPONS = {"WELCOME10": 10, "READMORE": 15, "STAFF": 30}


def coupon_percent(code):
    """The percentage a coupon ``code`` takes off (case-insensitive, spaces ignored); 0 for an unknown code."""
    return COUPONS.get(code.strip().upper(), 0)
''', ("code.strip().upper()", "code"), '''
def test_coupon_percent():
    assert coupon_percent(" welcome10 ") == 10
    assert coupon_percent("STAFF") == 30
    assert coupon_percent("nope") == 0
'''),
))

INVENTORY = Module("inventory.py", "Stock levels by ISBN.", "", (
    _f("restock", '''
def restock(stock, isbn, quantity):
    """Add ``quantity`` (a positive integer) copies of ``isbn`` to ``stock`` and return the new level."""
    if not isinstance(quantity, int) or quantity < 1:
        raise ValueError(f"quantity must be a positive integer, got {quantity!r}")
    stock[isbn] = stock.get(isbn, 0) + quantity
    return stock[isbn]
''', ("stock.get(isbn, 0) + quantity", "stock.get(isbn, 0) + 1"), '''
def test_restock():
    stock = {}
    assert restock(stock, "1", 5) == 5
    assert restock(stock, "1", 2) == 7
    with pytest.raises(ValueError):
        restock(stock, "1", -1)
'''),
    _f("reserve", '''
def reserve(stock, isbn, quantity):
    """Take ``quantity`` copies of ``isbn`` out of ``stock``: True when there were enough, else False
    (and the stock is left as it was)."""
    if stock.get(isbn, 0) < quantity:
        return False
    stock[isbn] -= quantity
    return True
''', ("if stock.get(isbn, 0) < quantity:", "if stock.get(isbn, 0) < quantity - 1:"), '''
def test_reserve():
    stock = {"1": 3}
    assert reserve(stock, "1", 2) and stock == {"1": 1}
    assert not reserve(stock, "1", 2) and stock == {"1": 1}
    assert not reserve(stock, "9", 1)
'''),
    _f("low_stock", '''
def low_stock(stock, threshold):
    """The ISBNs whose level is below ``threshold``, lowest first (ties by ISBN)."""
    return [isbn for isbn, level in sorted(stock.items(), key=lambda item: (item[1], item[0]))
            if level < threshold]
''', ("if level < threshold", "if level <= threshold"), '''
def test_low_stock():
    assert low_stock({"a": 5, "b": 1, "c": 2, "d": 2}, 3) == ["b", "c", "d"]
    assert low_stock({"a": 3}, 3) == []
'''),
))

ORDERS = Module("orders.py", "Orders: placing, looking up and cancelling.", "from cart import cart_total\n"
                "from inventory import reserve\n", (
    _f("place_order", '''
def place_order(orders, cart, catalog, stock):
    """Reserve the stock for every line of ``cart`` and record an order; return its id (1, 2, ...).

    When any line is short of stock, nothing is reserved and a ValueError names the ISBN.
    """
    for isbn, quantity in cart.items():
        if stock.get(isbn, 0) < quantity:
            raise ValueError(f"not enough stock for ISBN {isbn}")
    for isbn, quantity in cart.items():
        reserve(stock, isbn, quantity)
    order_id = len(orders) + 1
    orders[order_id] = {"lines": dict(cart), "total": cart_total(cart, catalog), "status": "placed"}
    return order_id
''', ("order_id = len(orders) + 1", "order_id = len(orders)"), '''
def test_place_order():
    catalog = {"1": {"title": "A", "author": "B", "price": 2.0}}
    orders, stock = {}, {"1": 5}
    assert place_order(orders, {"1": 2}, catalog, stock) == 1
    assert orders[1] == {"lines": {"1": 2}, "total": 4.0, "status": "placed"} and stock == {"1": 3}
    with pytest.raises(ValueError):
        place_order(orders, {"1": 9}, catalog, stock)
'''),
    _f("order_status", '''
def order_status(orders, order_id):
    """The status of order ``order_id``, or "unknown" when there is no such order."""
    order = orders.get(order_id)
    return "unknown" if order is None else order["status"]
''', ('"unknown" if order is None else order["status"]', '"placed" if order is None else order["status"]'), '''
def test_order_status():
    assert order_status({1: {"status": "placed"}}, 1) == "placed"
    assert order_status({}, 7) == "unknown"
'''),
    _f("cancel_order", '''
def cancel_order(orders, order_id, stock):
    """Cancel a placed order and put its copies back in ``stock``; True if it was cancelled.

    An unknown or already cancelled order is left alone (False).
    """
    order = orders.get(order_id)
    if order is None or order["status"] != "placed":
        return False
    for isbn, quantity in order["lines"].items():
        stock[isbn] = stock.get(isbn, 0) + quantity
    order["status"] = "cancelled"
    return True
''', ('order["status"] = "cancelled"', 'order["status"] = "placed"'), '''
def test_cancel_order():
    orders, stock = {1: {"lines": {"1": 2}, "total": 4.0, "status": "placed"}}, {"1": 0}
    assert cancel_order(orders, 1, stock) and stock == {"1": 2}
    assert orders[1]["status"] == "cancelled"
    assert not cancel_order(orders, 1, stock) and stock == {"1": 2}
'''),
))

REPORTS = Module("reports.py", "Sales reports over the orders.", "", (
    _f("revenue", '''
def revenue(orders):
    """The total of every order that is not cancelled, rounded to cents."""
    return round(sum(o["total"] for o in orders.values() if o["status"] != "cancelled"), 2)
''', ('if o["status"] != "cancelled"', 'if o["status"]'), '''
def test_revenue():
    orders = {1: {"total": 4.0, "status": "placed"}, 2: {"total": 6.0, "status": "cancelled"}}
    assert revenue(orders) == 4.0
'''),
    _f("best_sellers", '''
def best_sellers(orders, k):
    """The ``k`` ISBNs with the most copies in orders that are not cancelled, most first (ties by ISBN)."""
    copies = {}
    for order in orders.values():
        if order["status"] != "cancelled":
            for isbn, quantity in order["lines"].items():
                copies[isbn] = copies.get(isbn, 0) + quantity
    return [isbn for isbn, _ in sorted(copies.items(), key=lambda item: (-item[1], item[0]))[:k]]
''', ("key=lambda item: (-item[1], item[0])", "key=lambda item: (item[1], item[0])"), '''
def test_best_sellers():
    orders = {1: {"lines": {"a": 1, "b": 4}, "status": "placed"}, 2: {"lines": {"a": 2, "c": 9}, "status": "cancelled"}}
    assert best_sellers(orders, 2) == ["b", "a"]
'''),
    _f("average_order_value", '''
def average_order_value(orders):
    """The mean total of the orders that are not cancelled, rounded to cents; 0.0 when there are none."""
    totals = [o["total"] for o in orders.values() if o["status"] != "cancelled"]
    return round(sum(totals) / len(totals), 2) if totals else 0.0
''', ("sum(totals) / len(totals)", "sum(totals) / (len(totals) + 1)"), '''
def test_average_order_value():
    orders = {1: {"total": 4.0, "status": "placed"}, 2: {"total": 8.0, "status": "placed"},
              3: {"total": 100.0, "status": "cancelled"}}
    assert average_order_value(orders) == 6.0
    assert average_order_value({}) == 0.0
'''),
))

CUSTOMERS = Module("customers.py", "Customers and their loyalty points.", "", (
    _f("register_customer", '''
def register_customer(customers, email, name):
    """Register a customer under ``email`` (lower-cased, must contain "@" and be new); return the record."""
    key = email.strip().lower()
    if "@" not in key:
        raise ValueError(f"not an email address: {email!r}")
    if key in customers:
        raise ValueError(f"{key} is already registered")
    customers[key] = {"name": name, "points": 0}
    return customers[key]
''', ("key = email.strip().lower()", "key = email.strip()"), '''
def test_register_customer():
    customers = {}
    assert register_customer(customers, " Ada@Example.org", "Ada") == {"name": "Ada", "points": 0}
    assert "ada@example.org" in customers
    with pytest.raises(ValueError):
        register_customer(customers, "ADA@example.org", "Ada again")
    with pytest.raises(ValueError):
        register_customer(customers, "no-at-sign", "X")
'''),
    _f("award_points", '''
def award_points(customers, email, amount_spent):
    """Give a customer one point per whole unit of money spent; return the new balance."""
    record = customers[email.strip().lower()]
    record["points"] += int(amount_spent)
    return record["points"]
''', ("int(amount_spent)", "round(amount_spent)"), '''
def test_award_points():
    customers = {"a@b.c": {"name": "A", "points": 3}}
    assert award_points(customers, "A@B.C", 10.9) == 13
'''),
    _f("redeem_points", '''
def redeem_points(customers, email, points):
    """Spend ``points`` of a customer's balance for money off (100 points = 5.0); a ValueError when short."""
    record = customers[email.strip().lower()]
    if points > record["points"]:
        raise ValueError(f"only {record['points']} points available")
    record["points"] -= points
    return round(points * 0.05, 2)
''', ("if points > record[\"points\"]:", "if points > record[\"points\"] + 10:"), '''
def test_redeem_points():
    customers = {"a@b.c": {"name": "A", "points": 150}}
    assert redeem_points(customers, "a@b.c", 100) == 5.0 and customers["a@b.c"]["points"] == 50
    with pytest.raises(ValueError):
        redeem_points(customers, "a@b.c", 51)
'''),
))

SHIPPING = Module("shipping.py", "Shipping costs and delivery estimates.", "", (
    _f("shipping_cost", '''
def shipping_cost(weight_kg, zone):
    """The cost of a parcel: 4.0 base plus 1.5 per started kilogram, doubled for zone "abroad"."""
    if weight_kg <= 0:
        raise ValueError(f"weight must be positive, got {weight_kg}")
    started = int(weight_kg) + (0 if float(weight_kg).is_integer() else 1)
    cost = 4.0 + 1.5 * started
    return cost * 2 if zone == "abroad" else cost
''', ("(0 if float(weight_kg).is_integer() else 1)", "0"), '''
def test_shipping_cost():
    assert shipping_cost(1, "home") == 5.5
    assert shipping_cost(1.2, "home") == 7.0
    assert shipping_cost(2, "abroad") == 14.0
    with pytest.raises(ValueError):
        shipping_cost(0, "home")
'''),
    _f("free_shipping", '''
def free_shipping(order_total, zone):
    """Whether an order ships free: from 25.0 at home, from 60.0 abroad."""
    return order_total >= (60.0 if zone == "abroad" else 25.0)
''', ("order_total >= (", "order_total > ("), '''
def test_free_shipping():
    assert free_shipping(25.0, "home") and not free_shipping(24.99, "home")
    assert free_shipping(60.0, "abroad") and not free_shipping(59.0, "abroad")
'''),
    _f("delivery_days", '''
def delivery_days(zone, express=False):
    """Working days to deliver: home 3 (express 1), abroad 7 (express 3); a ValueError for another zone."""
    days = {"home": (3, 1), "abroad": (7, 3)}
    if zone not in days:
        raise ValueError(f"unknown zone {zone!r}")
    return days[zone][1 if express else 0]
''', ("days[zone][1 if express else 0]", "days[zone][0 if express else 1]"), '''
def test_delivery_days():
    assert delivery_days("home") == 3 and delivery_days("home", express=True) == 1
    assert delivery_days("abroad", True) == 3
    with pytest.raises(ValueError):
        delivery_days("moon")
'''),
))

_HIDDEN = {
    "test_hidden_catalog.py": '''
import pytest
from catalog import add_book, find_by_author, price_of

def test_add_book_stores_the_fields():
    assert add_book({}, "x", "T", "A", 0)["x"] == {"title": "T", "author": "A", "price": 0}

def test_add_book_refuses_a_duplicate_and_a_negative_price():
    with pytest.raises(ValueError):
        add_book({"x": {}}, "x", "T", "A", 1)
    with pytest.raises(ValueError):
        add_book({}, "y", "T", "A", -0.01)

def test_find_by_author_ignores_case_and_sorts():
    catalog = {"b": {"author": "Ann"}, "a": {"author": "ANN"}, "c": {"author": "Bo"}}
    assert find_by_author(catalog, "ann") == ["a", "b"] and find_by_author(catalog, "nobody") == []

def test_price_of():
    assert price_of({"k": {"price": 12.25}}, "k") == 12.25
    with pytest.raises(KeyError):
        price_of({"k": {"price": 1}}, "z")
''',
    "test_hidden_cart.py": '''
import pytest
from cart import add_to_cart, cart_total, remove_from_cart

def test_add_to_cart_accumulates():
    assert add_to_cart({"a": 1}, "a", 4) == {"a": 5} and add_to_cart({}, "b") == {"b": 1}

def test_add_to_cart_refuses_bad_quantities():
    for bad in (0, -2, 1.5):
        with pytest.raises(ValueError):
            add_to_cart({}, "a", bad)

def test_remove_from_cart():
    assert remove_from_cart({"a": 5}, "a", 2) == {"a": 3}
    assert remove_from_cart({"a": 2}, "a", 2) == {} and remove_from_cart({"a": 1}, "a", 5) == {}

def test_cart_total_multiplies_by_quantity():
    catalog = {"a": {"price": 3.1}, "b": {"price": 0.45}}
    assert cart_total({"a": 3, "b": 2}, catalog) == 10.2 and cart_total({"b": 1}, catalog) == 0.45
''',
    "test_hidden_pricing.py": '''
import pytest
from pricing import apply_percentage, bulk_discount, coupon_percent

def test_apply_percentage():
    assert apply_percentage(80.0, 25) == 60.0 and apply_percentage(9.99, 100) == 0.0
    with pytest.raises(ValueError):
        apply_percentage(1.0, -5)

def test_bulk_discount_thresholds():
    assert bulk_discount(9, 2.0) == 18.0 and bulk_discount(10, 2.0) == 18.0
    assert bulk_discount(49, 1.0) == 44.1 and bulk_discount(60, 1.0) == 48.0

def test_coupon_percent():
    assert coupon_percent("readmore") == 15 and coupon_percent("  Staff") == 30 and coupon_percent("") == 0
''',
    "test_hidden_inventory.py": '''
import pytest
from inventory import low_stock, reserve, restock

def test_restock():
    stock = {"a": 1}
    assert restock(stock, "a", 10) == 11 and restock(stock, "b", 3) == 3
    with pytest.raises(ValueError):
        restock(stock, "a", 0)

def test_reserve_all_or_nothing():
    stock = {"a": 2}
    assert reserve(stock, "a", 2) and stock["a"] == 0
    assert not reserve(stock, "a", 1) and stock["a"] == 0

def test_low_stock_order_and_strictness():
    assert low_stock({"x": 0, "y": 4, "w": 0}, 4) == ["w", "x"] and low_stock({}, 1) == []
''',
    "test_hidden_orders.py": '''
import pytest
from orders import cancel_order, order_status, place_order

CATALOG = {"a": {"price": 5.0}, "b": {"price": 1.5}}

def test_place_order_numbers_orders_and_reserves():
    orders, stock = {}, {"a": 3, "b": 3}
    assert place_order(orders, {"a": 1}, CATALOG, stock) == 1
    assert place_order(orders, {"a": 1, "b": 2}, CATALOG, stock) == 2
    assert orders[2]["total"] == 8.0 and stock == {"a": 1, "b": 1}

def test_place_order_short_of_stock_changes_nothing():
    orders, stock = {}, {"a": 1, "b": 0}
    with pytest.raises(ValueError):
        place_order(orders, {"a": 1, "b": 1}, CATALOG, stock)
    assert orders == {} and stock == {"a": 1, "b": 0}

def test_order_status():
    assert order_status({3: {"status": "cancelled"}}, 3) == "cancelled" and order_status({}, 1) == "unknown"

def test_cancel_order_returns_stock_once():
    orders, stock = {1: {"lines": {"a": 2}, "status": "placed"}}, {}
    assert cancel_order(orders, 1, stock) and not cancel_order(orders, 1, stock) and stock == {"a": 2}
    assert not cancel_order(orders, 5, stock)
''',
    "test_hidden_customers.py": '''
import pytest
from customers import award_points, redeem_points, register_customer

def test_register_customer_normalises_and_refuses_duplicates():
    customers = {}
    register_customer(customers, "Bo@X.io ", "Bo")
    assert customers == {"bo@x.io": {"name": "Bo", "points": 0}}
    with pytest.raises(ValueError):
        register_customer(customers, "bo@x.io", "Bo")

def test_award_points_counts_whole_units():
    customers = {"bo@x.io": {"name": "Bo", "points": 0}}
    assert award_points(customers, "bo@x.io", 7.99) == 7 and award_points(customers, "BO@x.io", 3) == 10

def test_redeem_points():
    customers = {"bo@x.io": {"name": "Bo", "points": 40}}
    assert redeem_points(customers, "bo@x.io", 40) == 2.0 and customers["bo@x.io"]["points"] == 0
    with pytest.raises(ValueError):
        redeem_points(customers, "bo@x.io", 1)
''',
    "test_hidden_shipping.py": '''
import pytest
from shipping import delivery_days, free_shipping, shipping_cost

def test_shipping_cost_counts_started_kilograms():
    assert shipping_cost(3, "home") == 8.5 and shipping_cost(0.1, "home") == 5.5
    assert shipping_cost(2.5, "abroad") == 17.0
    with pytest.raises(ValueError):
        shipping_cost(-1, "abroad")

def test_free_shipping_thresholds():
    assert free_shipping(100, "home") and free_shipping(25, "home") and not free_shipping(30, "abroad")

def test_delivery_days():
    assert delivery_days("abroad") == 7 and delivery_days("abroad", express=True) == 3
    with pytest.raises(ValueError):
        delivery_days("")
''',
    "test_hidden_reports.py": '''
from reports import average_order_value, best_sellers, revenue

ORDERS = {1: {"lines": {"a": 2, "b": 1}, "total": 10.0, "status": "placed"},
          2: {"lines": {"b": 5}, "total": 5.0, "status": "placed"},
          3: {"lines": {"c": 50}, "total": 99.0, "status": "cancelled"}}

def test_revenue_skips_cancelled():
    assert revenue(ORDERS) == 15.0 and revenue({}) == 0

def test_best_sellers():
    assert best_sellers(ORDERS, 1) == ["b"] and best_sellers(ORDERS, 5) == ["b", "a"]

def test_average_order_value():
    assert average_order_value(ORDERS) == 7.5 and average_order_value({}) == 0.0
''',
}


# --- the hidden tests as call scripts ---------------------------------------------------------------------------
# The same checks as the pytest files above, as steps the sandbox runs against a generated codebase and answers the
# trusted process compares (iclr24.sandbox.calls): the test files and their expected values never enter the
# sandbox. A case passes when every step gives what it expects.

def _eq(target, *args, expect, **kwargs):
    return Call(target, args, kwargs), Expect.equal(expect)


def _true(target, *args, truth=True, **kwargs):
    return Call(target, args, kwargs), Expect.truth(truth)


def _raises(target, *args, error="ValueError", **kwargs):
    return Call(target, args, kwargs), Expect.raises(error)


def _let(name, value):
    return Let(name, value), Expect.ok()


def _get(name, *keys, expect):
    return Get(name, keys), Expect.equal(expect)


_SHOP = {"a": {"price": 5.0}, "b": {"price": 1.5}}
_ORDERS = {1: {"lines": {"a": 2, "b": 1}, "total": 10.0, "status": "placed"},
           2: {"lines": {"b": 5}, "total": 5.0, "status": "placed"},
           3: {"lines": {"c": 50}, "total": 99.0, "status": "cancelled"}}
_BO = {"bo@x.io": {"name": "Bo", "points": 0}}

_CASES: dict[str, dict[str, tuple]] = {
    "test_hidden_catalog.py": {
        "test_add_book_stores_the_fields": (
            _let("book", {}), _eq("catalog.add_book", Ref("book"), "x", "T", "A", 0, expect={"x": {
                "title": "T", "author": "A", "price": 0}}),),
        "test_add_book_refuses_a_duplicate_and_a_negative_price": (
            _raises("catalog.add_book", {"x": {}}, "x", "T", "A", 1),
            _raises("catalog.add_book", {}, "y", "T", "A", -0.01)),
        "test_find_by_author_ignores_case_and_sorts": (
            _eq("catalog.find_by_author", {"b": {"author": "Ann"}, "a": {"author": "ANN"}, "c": {"author": "Bo"}},
                "ann", expect=["a", "b"]),
            _eq("catalog.find_by_author", {"b": {"author": "Ann"}}, "nobody", expect=[])),
        "test_price_of": (
            _eq("catalog.price_of", {"k": {"price": 12.25}}, "k", expect=12.25),
            _raises("catalog.price_of", {"k": {"price": 1}}, "z", error="KeyError")),
    },
    "test_hidden_cart.py": {
        "test_add_to_cart_accumulates": (
            _eq("cart.add_to_cart", {"a": 1}, "a", 4, expect={"a": 5}),
            _eq("cart.add_to_cart", {}, "b", expect={"b": 1})),
        "test_add_to_cart_refuses_bad_quantities": tuple(
            _raises("cart.add_to_cart", {}, "a", bad) for bad in (0, -2, 1.5)),
        "test_remove_from_cart": (
            _eq("cart.remove_from_cart", {"a": 5}, "a", 2, expect={"a": 3}),
            _eq("cart.remove_from_cart", {"a": 2}, "a", 2, expect={}),
            _eq("cart.remove_from_cart", {"a": 1}, "a", 5, expect={})),
        "test_cart_total_multiplies_by_quantity": (
            _eq("cart.cart_total", {"a": 3, "b": 2}, {"a": {"price": 3.1}, "b": {"price": 0.45}}, expect=10.2),
            _eq("cart.cart_total", {"b": 1}, {"a": {"price": 3.1}, "b": {"price": 0.45}}, expect=0.45)),
    },
    "test_hidden_pricing.py": {
        "test_apply_percentage": (
            _eq("pricing.apply_percentage", 80.0, 25, expect=60.0),
            _eq("pricing.apply_percentage", 9.99, 100, expect=0.0),
            _raises("pricing.apply_percentage", 1.0, -5)),
        "test_bulk_discount_thresholds": (
            _eq("pricing.bulk_discount", 9, 2.0, expect=18.0), _eq("pricing.bulk_discount", 10, 2.0, expect=18.0),
            _eq("pricing.bulk_discount", 49, 1.0, expect=44.1), _eq("pricing.bulk_discount", 60, 1.0, expect=48.0)),
        "test_coupon_percent": (
            _eq("pricing.coupon_percent", "readmore", expect=15), _eq("pricing.coupon_percent", "  Staff", expect=30),
            _eq("pricing.coupon_percent", "", expect=0)),
    },
    "test_hidden_inventory.py": {
        "test_restock": (
            _let("stock", {"a": 1}), _eq("inventory.restock", Ref("stock"), "a", 10, expect=11),
            _eq("inventory.restock", Ref("stock"), "b", 3, expect=3),
            _raises("inventory.restock", Ref("stock"), "a", 0)),
        "test_reserve_all_or_nothing": (
            _let("stock", {"a": 2}), _true("inventory.reserve", Ref("stock"), "a", 2), _get("stock", "a", expect=0),
            _true("inventory.reserve", Ref("stock"), "a", 1, truth=False), _get("stock", "a", expect=0)),
        "test_low_stock_order_and_strictness": (
            _eq("inventory.low_stock", {"x": 0, "y": 4, "w": 0}, 4, expect=["w", "x"]),
            _eq("inventory.low_stock", {}, 1, expect=[])),
    },
    "test_hidden_orders.py": {
        "test_place_order_numbers_orders_and_reserves": (
            _let("book", {}), _let("stock", {"a": 3, "b": 3}),
            _eq("orders.place_order", Ref("book"), {"a": 1}, _SHOP, Ref("stock"), expect=1),
            _eq("orders.place_order", Ref("book"), {"a": 1, "b": 2}, _SHOP, Ref("stock"), expect=2),
            _get("book", 2, "total", expect=8.0), _get("stock", expect={"a": 1, "b": 1})),
        "test_place_order_short_of_stock_changes_nothing": (
            _let("book", {}), _let("stock", {"a": 1, "b": 0}),
            _raises("orders.place_order", Ref("book"), {"a": 1, "b": 1}, _SHOP, Ref("stock")),
            _get("book", expect={}), _get("stock", expect={"a": 1, "b": 0})),
        "test_order_status": (
            _eq("orders.order_status", {3: {"status": "cancelled"}}, 3, expect="cancelled"),
            _eq("orders.order_status", {}, 1, expect="unknown")),
        "test_cancel_order_returns_stock_once": (
            _let("book", {1: {"lines": {"a": 2}, "status": "placed"}}), _let("stock", {}),
            _true("orders.cancel_order", Ref("book"), 1, Ref("stock")),
            _true("orders.cancel_order", Ref("book"), 1, Ref("stock"), truth=False),
            _get("stock", expect={"a": 2}),
            _true("orders.cancel_order", Ref("book"), 5, Ref("stock"), truth=False)),
    },
    "test_hidden_customers.py": {
        "test_register_customer_normalises_and_refuses_duplicates": (
            _let("people", {}), (Call("customers.register_customer", (Ref("people"), "Bo@X.io ", "Bo")), Expect.ok()),
            _get("people", expect=_BO), _raises("customers.register_customer", Ref("people"), "bo@x.io", "Bo")),
        "test_award_points_counts_whole_units": (
            _let("people", _BO), _eq("customers.award_points", Ref("people"), "bo@x.io", 7.99, expect=7),
            _eq("customers.award_points", Ref("people"), "BO@x.io", 3, expect=10)),
        "test_redeem_points": (
            _let("people", {"bo@x.io": {"name": "Bo", "points": 40}}),
            _eq("customers.redeem_points", Ref("people"), "bo@x.io", 40, expect=2.0),
            _get("people", "bo@x.io", "points", expect=0),
            _raises("customers.redeem_points", Ref("people"), "bo@x.io", 1)),
    },
    "test_hidden_shipping.py": {
        "test_shipping_cost_counts_started_kilograms": (
            _eq("shipping.shipping_cost", 3, "home", expect=8.5),
            _eq("shipping.shipping_cost", 0.1, "home", expect=5.5),
            _eq("shipping.shipping_cost", 2.5, "abroad", expect=17.0), _raises("shipping.shipping_cost", -1, "abroad")),
        "test_free_shipping_thresholds": (
            _true("shipping.free_shipping", 100, "home"), _true("shipping.free_shipping", 25, "home"),
            _true("shipping.free_shipping", 30, "abroad", truth=False)),
        "test_delivery_days": (
            _eq("shipping.delivery_days", "abroad", expect=7),
            _eq("shipping.delivery_days", "abroad", express=True, expect=3),
            _raises("shipping.delivery_days", "")),
    },
    "test_hidden_reports.py": {
        "test_revenue_skips_cancelled": (
            _eq("reports.revenue", _ORDERS, expect=15.0), _eq("reports.revenue", {}, expect=0)),
        "test_best_sellers": (
            _eq("reports.best_sellers", _ORDERS, 1, expect=["b"]),
            _eq("reports.best_sellers", _ORDERS, 5, expect=["b", "a"])),
        "test_average_order_value": (
            _eq("reports.average_order_value", _ORDERS, expect=7.5),
            _eq("reports.average_order_value", {}, expect=0.0)),
    },
}

BOOKSHOP = CodingTask(
    name="bookshop",
    spec=("A bookshop backend in Python: plain functions over dicts, one module each:\n"
          "catalog.py: add_book(catalog, isbn, title, author, price), find_by_author(catalog, author), "
          "price_of(catalog, isbn)\n"
          "cart.py: add_to_cart(cart, isbn, quantity=1), remove_from_cart(cart, isbn, quantity=1), "
          "cart_total(cart, catalog)\n"
          "pricing.py: apply_percentage(total, percent), bulk_discount(quantity, unit_price) (10% off from 10, "
          "20% from 50), coupon_percent(code) (WELCOME10 10, READMORE 15, STAFF 30)\n"
          "inventory.py: restock(stock, isbn, quantity), reserve(stock, isbn, quantity) (all or nothing), "
          "low_stock(stock, threshold)\n"
          "orders.py: place_order(orders, cart, catalog, stock) (ids 1, 2, ...), order_status(orders, order_id), "
          "cancel_order(orders, order_id, stock)\n"
          "reports.py: revenue(orders), best_sellers(orders, k), average_order_value(orders)\n"
          "customers.py: register_customer(customers, email, name), award_points(customers, email, amount_spent) "
          "(1 per whole unit), redeem_points(customers, email, points) (100 = 5.0)\n"
          "shipping.py: shipping_cost(weight_kg, zone) (4.0 + 1.5 per started kg, x2 abroad), "
          "free_shipping(order_total, zone) (from 25.0, abroad 60.0), delivery_days(zone, express=False)\n"
          "Bad input raises ValueError; money is rounded to cents; cancelled orders do not count."),
    modules=(CATALOG, CART, PRICING, INVENTORY, ORDERS, REPORTS, CUSTOMERS, SHIPPING),
    hidden_tests={name: text.lstrip("\n") for name, text in _HIDDEN.items()},
    hidden_cases=_CASES,
)

#: One-file tasks for a small real model: the spec, and hidden tests.
ONE_STEP_TASKS = (
    CodingTask("add", "Write calc.py with a function add(a, b) that returns the sum of a and b.",
               hidden_tests={"test_hidden_calc.py": "from calc import add\n\ndef test_add():\n"
                                                    "    assert add(2, 3) == 5 and add(-1, 1) == 0\n"},
               hidden_cases={"test_hidden_calc.py": {"test_add": (_eq("calc.add", 2, 3, expect=5),
                                                                  _eq("calc.add", -1, 1, expect=0))}}),
    CodingTask("is_even", "Write parity.py with a function is_even(n) that returns True when n is even.",
               hidden_tests={"test_hidden_parity.py": "from parity import is_even\n\ndef test_is_even():\n"
                                                      "    assert is_even(4) and not is_even(7)\n"},
               hidden_cases={"test_hidden_parity.py": {"test_is_even": (
                   _true("parity.is_even", 4), _true("parity.is_even", 7, truth=False))}}),
    CodingTask("greet", "Write greet.py with a function greet(name) that returns 'Hello, ' followed by the name.",
               hidden_tests={"test_hidden_greet.py": "from greet import greet\n\ndef test_greet():\n"
                                                     "    assert greet('Ada') == 'Hello, Ada'\n"},
               hidden_cases={"test_hidden_greet.py": {"test_greet": (
                   _eq("greet.greet", "Ada", expect="Hello, Ada"),)}}),
)
