"""Word lists behind the guards, English and Chinese.  Data only; the rules are in checks.py."""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _pairs(text: str) -> list[tuple[str, str]]:
    return [(a, b) for a, b in (item.split() for item in text.split(";") if item.strip())]


# Negation markers. English forms are matched as whole tokens ("n't" becomes "not" first).
NEGATIONS_EN = _words(
    "aint arent cannot cant couldnt didnt doesnt dont hadnt hasnt havent isnt mustnt n't neednt "
    "neither never no nobody none nor not nothing nowhere shouldnt wasnt werent without wont "
    "wouldnt"
)

# Chinese negators, each with the compounds in which the character does not negate.
NEGATIONS_ZH = {
    "不": "不错 不过 不少 不仅 不但 不断 不管 不论 不久 不同 不如 不然 不停 不愧 不得不 不一会",
    "没": "",
    "未": "未来 未成年 未婚",
    "别": "别人 别的 别墅 别名 别针 区别 类别 分别 特别 级别 性别 告别 差别 识别 辨别 个别",
    "勿": "",
    "莫": "莫名",
    "无法": "",
    "无需": "",
    "无须": "",
    "甭": "",
}

# Pairs of opposite actions and qualities. A guard rejects two questions when one holds a
# word of a pair and the other holds its opposite (and neither holds both).
ANTONYMS_EN = _pairs(
    "register unregister; register deregister; signup signout; login logout; log-in log-out; "
    "enable disable; activate deactivate; open close; start stop; start end; begin end; "
    "increase decrease; increase reduce; raise lower; add remove; add delete; create delete; "
    "install uninstall; subscribe unsubscribe; lock unlock; block unblock; allow deny; allow "
    "block; accept reject; approve reject; approve deny; buy sell; import export; upload "
    "download; send receive; deposit withdraw; upgrade downgrade; include exclude; show hide; "
    "connect disconnect; follow unfollow; mute unmute; pause resume; freeze unfreeze; encrypt "
    "decrypt; compress decompress; mount unmount; charge discharge; credit debit; inbound "
    "outbound; incoming outgoing; input output; push pull; win lose; gain lose; on off; in out; "
    "up down; max min; maximum minimum; more less; most least; before after; above below; over "
    "under; inside outside; first last; early late; earlier later; cheap expensive; good bad; "
    "better worse; best worst; high low; higher lower; highest lowest; long short; longer "
    "shorter; fast slow; faster slower; big small; bigger smaller; large small; larger smaller; "
    "hot cold; safe unsafe; safe dangerous; healthy unhealthy; legal illegal; possible "
    "impossible; true false; right wrong; correct incorrect; happy sad; love hate; like "
    "dislike; agree disagree; positive negative; always never; all none; male female; men "
    "women; man woman; boy girl; husband wife; north south; east west; left right; plus minus; "
    "add subtract; multiply divide; ascending descending; rich poor; strong weak; easy hard; "
    "easy difficult; old new; old young; light heavy; light dark; wet dry; full empty; private "
    "public; online offline; manual automatic; hire fire; borrow lend; borrow repay; pay "
    "refund; arrive depart; import export; maximize minimize; overestimate underestimate; "
    "overpaid underpaid; dead alive; why how; advantage disadvantage; pro con; pros cons; few "
    "many; sooner later; permanent temporary; permanently temporarily; delete deactivate; "
    "forever temporarily"
)

ANTONYMS_ZH = _pairs(
    "注册 注销; 登录 退出; 登录 登出; 开通 关闭; 开通 取消; 开启 关闭; 打开 关闭; 启用 禁用; 激活 停用; 增加 减少; 提高 降低; 上调 下调; 提升 降低; "
    "上涨 下跌; 升级 降级; 买入 卖出; 购买 出售; 买 卖; 充值 提现; 存款 取款; 存入 取出; 转入 转出; 收款 付款; 收入 支出; 绑定 解绑; 冻结 解冻; "
    "锁定 解锁; 加入 退出; 关注 取关; 上传 下载; 发送 接收; 安装 卸载; 订阅 退订; 添加 删除; 新增 删除; 创建 删除; 允许 禁止; 同意 拒绝; 接受 拒绝; "
    "开始 结束; 开始 停止; 上班 下班; 上车 下车; 入职 离职; 借款 还款; 最高 最低; 最大 最小; 最多 最少; 最快 最慢; 最好 最差; 最早 最晚; 上午 下午; "
    "上个月 下个月; 上周 下周; 上一 下一; 以上 以下; 之前 之后; 以前 以后; 高 低; 大 小; 多 少; 长 短; 快 慢; 好 坏; 好 差; 贵 便宜; 冷 热; "
    "新 旧; 前 后; 男 女; 南 北; 左 右; 正 负; 加 减; 乘 除; 涨 跌; 赢 输; 胜 负; 对 错; 真 假; 进 出; 早 晚; 胖 瘦; 难 易; 深 浅; "
    "宽 窄; 厚 薄; 远 近; 轻 重; 强 弱; 内 外; 老 新; 老 少"
)

# Words that ask different questions: two questions asking with different ones differ.
WH_EN = _words("when where who whom whose why")
WH_ZH = ("什么时候", "何时", "哪里", "哪儿", "在哪", "谁", "为什么", "为何")

# English words that carry no content for the order and entity guards.  Relation words
# ("than", "from", "to", "vs") are NOT here: swapping what stands around them changes meaning.
STOPWORDS_EN = _words(
    "a about also am an and any anyone anything are as be been being but can could did do "
    "does get got had has have here how if is it its just may might "
    "must one or please really shall should so some someone something "
    "that the there these this those very was way ways were what which "
    "will would"
)

# Words that add no content when one question has them and the other does not.
FILLERS_EN = _words(
    "actually anybody basically best ever exactly explain go going good kind know like make "
    "need ok okay possible possibly somebody sort tell thing things use using want"
    # hedges: "How long does shipping usually take?" asks how long shipping takes
    " usually generally typically normally roughly approximately"
)
FILLERS_ZH = _words(
    "一下 一个 具体 到底 可不可以 吧 呀 告诉 呢 啊 应该 是不是 有没有 知道 究竟 请问 这个 那个 需要 是否 才 才能 能否 可否 会 得 过 着 已经 就是"
    # colloquial question words (= 什么, 怎么), particles, light verbs and degree words that
    # change how a question is asked, not what it asks
    " 啥 咋 咋样 怎样 怎么样 样 么 哦 嘛 啦 的话 点 一点 一些 有些 自己 那么 这么 比较 大家 有人 帮忙 帮 求"
    # which (ones) = what: "有哪些好玩的地方" = "有什么好玩的地方"
    " 哪些 哪个 哪种 哪一个"
    # hedges: "退款一般多久到账" asks how long a refund takes
    " 一般 通常 平时 平常 大概 大约 一般来说"
    # intensifiers (like 比较; a superlative, 最, still counts), "about", a request (like 求)
    " 很 非常 特别 挺 真 真的 确实 关于 找"
)

# Relation words: they order the question (order guard) but are not content of their own.
RELATIONS_EN = _words(
    "after at before between by for from in into of on over than to versus vs with"
)

IRREGULAR_EN = {
    "men": "man", "women": "woman", "children": "child", "people": "person", "feet": "foot",
    "teeth": "tooth", "mice": "mouse", "geese": "goose", "did": "do", "does": "do",
    "done": "do", "went": "go", "gone": "go", "made": "make", "got": "get", "bought": "buy",
    "sold": "sell", "paid": "pay", "lost": "lose", "won": "win", "better": "good",
    "best": "good", "worse": "bad", "worst": "bad",
}  # fmt: skip
# Prefixes and suffixes that turn a word into its opposite: fair/unfair, careful/careless.
NEGATING_PREFIXES = ("un", "in", "im", "il", "ir", "dis", "non", "non-", "a")

# Chinese moods: permission or ability, obligation, a future (the modality guard), and the
# marks of a past.
MOODS_ZH = {
    **dict.fromkeys(
        "可以 能 能够 可 允许 准许 能否 可否 能不能 可不可以 才能 才可以".split(), "can"
    ),
    **dict.fromkeys("需要 要 应该 应当 必须 需不需要 要不要 用不用 得要".split(), "must"),
    **dict.fromkeys("会 将 将要 即将 会不会".split(), "will"),
}
PAST_ZH = _words("了 过 已经 曾经")

# Words that narrow what is asked ("just for members", 自己, 才): the focus guard.
FOCUS_EN = _words(
    "just only even alone again own solely merely exclusively also too myself yourself "
    "himself herself itself ourselves yourselves themselves oneself"
)
FOCUS_ZH = _words("只 只有 只能 仅 仅仅 光 才 才能 才可以 都 还 又 再 也 自己 亲自 单独 另外")

# Chinese function words dropped by the order guard ("和" is symmetric: "A和B" = "B和A").
STOPWORDS_ZH = _words(
    "一下 与 个 么 也 了 什么 们 及 可以 吗 吧 呀 呢 和 啊 在 如何 就 怎么 想 是 有 的 能 要 请 跟 还 这 那 都 问"
)
# Personal pronouns by person: who does what to whom orders a question ("Do you love me?" /
# "Do I love you?"), yet a pronoun adds no content of its own.
PERSONS_EN = {
    **dict.fromkeys(("i", "me", "my", "mine", "myself"), "1s"),
    **dict.fromkeys(("we", "us", "our", "ours", "ourselves"), "1p"),
    **dict.fromkeys(("you", "your", "yours", "yourself", "yourselves"), "2"),
    **dict.fromkeys(("he", "him", "his", "himself"), "3m"),
    **dict.fromkeys(("she", "her", "hers", "herself"), "3f"),
    **dict.fromkeys(("they", "them", "their", "theirs", "themselves"), "3p"),
}
# Pronouns order a Chinese question ("我借给他" / "他借给我") but add no content of their own.
PRONOUNS_ZH = _words("我 你 您 他 她 它 我们 你们 他们 她们 它们 咱们")

# Chinese numerals; a lone "一" counts only before a measure word ("一个", not "一下").
ZH_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6,
             "七": 7, "八": 8, "九": 9}  # fmt: skip
ZH_UNITS = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "亿": 100_000_000}
ZH_MEASURES = frozenset(
    "个只天年月日号点元块次岁米斤克吨公里里小时分钟秒周倍层楼张本件位名种家台辆部瓶杯碗份套颗条篇页章节"
)
ZH_NOT_NUMBERS = ("十分", "万一", "一下", "一样", "一些", "一直", "一定", "一起", "一般", "一切",
                  "一点", "二手", "一手", "统一", "唯一", "万万", "千万", "一旦", "一边", "一向", "一共")  # fmt: skip

NUMBER_WORDS_EN = {
    "zero": 0, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90, "hundred": 100, "thousand": 1000,
    "million": 1_000_000, "billion": 1_000_000_000, "dozen": 12, "half": 0.5,
}  # fmt: skip

# Discourse: what a user types around a question without asking anything (canonical.py).
# Phrases of the first two lists go wherever they stand at the start; SET_OFF words only when
# punctuation (or another opening phrase) follows them, since "hello world" or "亲子" are
# content.  Closings go at the end, only after punctuation ("How do you say thank you?").
# A lead-in that takes a clause also takes its "if" / "whether": "I was wondering if …".
OPENINGS_EN = (
    "um; umm; uh; uhh; uhm; erm; hmm; so; hi there; hello there; hey there; hi all; hi everyone; "
    "hello everyone; hey guys; hi guys; good morning; good afternoon; good evening; quick "
    "question; a quick question; just a quick question; one more question; i have a question; "
    "i have a quick question; i've got a question; i got a question; random question; "
    "thanks in advance; thank you in advance; "
    "sorry to bother you; sorry to bother; sorry for the dumb question; sorry if this is a dumb "
    "question; sorry if this is a stupid question; this might be a dumb question but; this "
    "might be a stupid question but; excuse me; pardon me; just curious; out of curiosity; "
    "pls; plz; please; kindly; dear support"
)
LEAD_INS_EN = (
    "i was just wondering; i was wondering; i'm wondering; i am wondering; i wonder; just "
    "wondering; wondering; i would like to know; i'd like to know; i want to know; i wanna know; "
    "i need to know; i would like to ask; i'd like to ask; i want to ask; i wanted to ask; i "
    "would like to inquire about; i'd like to inquire about; i would like to enquire about; i "
    "have a question about; i have a question regarding; can you tell me; could "
    "you tell me; can you please tell me; could you please tell me; would you tell me; would you "
    "mind telling me; please tell me; tell me; do you know; do you happen to know; does anyone "
    "know; does anybody know; anyone know; anybody know; please let me know; let me know; "
    "any idea; any ideas"
)
SET_OFF_EN = (
    "hi; hello; hey; hiya; greetings; er; hm; if you don't mind; if you do not mind; if "
    "possible; well; ok; okay; alright; anyway; also; basically; "
    "actually; honestly; help; please help; help please; can you help; can you help me; could "
    "you help me; i need help; need help; question"
)
CLOSINGS_EN = (
    "thanks; thank you; thanks so much; thx in advance; ty in advance; thank you so much; "
    "thanks a lot; thanks a bunch; many thanks; thanks in advance; thank you in advance; "
    "thanks for your help; thank you for your help; thanks for the help; thx; ty; tia; "
    "cheers; please; pls; plz; help; please help; help please; help me; please help me; any "
    "help appreciated; any help is appreciated; any help would be appreciated; any help would "
    "be great; appreciate it; i appreciate it; much appreciated; asap; if you don't mind; if "
    "you do not mind; if possible; if you can; if you could; no worries if not; um; uh; lol"
)
OPENINGS_ZH = (
    "请问; 请问一下; 麻烦问一下; 麻烦问下; 想问一下; 想问下; 我想问一下; 我想问下; 我想问; 问一下; 请教一下; 想请教一下; 我想请教一下; "
    "打扰一下; 不好意思打扰一下; 我想知道; 想知道; 我想了解一下; 想了解一下; 我有个问题; "
    "有个问题; 问个问题; 请告诉我; 告诉我; 能告诉我; 能不能告诉我; 可以告诉我; 谁知道; 有谁知道; 有没有人知道; 麻烦你; 麻烦您; "
    "咨询一下; 想咨询一下; 我想咨询一下; 请问一下大家; 问一下大家; 请问大家"
)
SET_OFF_ZH = (
    "那个; 这个; 就是; 就是说; 嗯; 呃; 额; 哦; 喂; 嗨; 亲; 亲亲; 那么; 然后; 对了; 话说; 麻烦; 你好; 您好; 你们好; 大家好; 哈喽; "
    "不好意思; 打扰了"
)
CLOSINGS_ZH = (
    "谢谢; 谢谢你; 谢谢您; 谢谢了; 谢谢啦; 谢谢哈; 谢啦; 多谢; 感谢; 非常感谢; 万分感谢; 先谢谢了; 提前谢谢; 麻烦了; 麻烦你了; 麻烦您了; 拜托了; "
    "谢谢大家; 谢谢各位; 感谢大家; 多谢大家; "
    "急; 急急急; 在线等; 在线等急; 求解答; 求解; 求助; 求大神; 求告知; 求回答; 哈哈"
)
