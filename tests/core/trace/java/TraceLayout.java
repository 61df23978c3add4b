// Reads trace message bodies (one per line of stdin, base64 of UTF-8) the way RocketMQ's Java client
// splits and parses them: String.split on U+0002 then U+0001 (trailing empty strings dropped), the
// reference field indexes, Long.parseLong / Integer.parseInt / Boolean.parseBoolean, MessageType and
// ConsumeReturnType by ordinal (0..4), LocalTransactionState by name. Written for mqgate's tests from
// the published layout; prints one tab-separated line per record: type, then name=value pairs.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;

public class TraceLayout {
    static final List<String> STATES = List.of("COMMIT_MESSAGE", "ROLLBACK_MESSAGE", "UNKNOW");

    static int ordinal(String text) {
        int v = Integer.parseInt(text);
        if (v < 0 || v > 4) throw new IllegalArgumentException("ordinal out of range: " + v);
        return v;
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String b64;
        while ((b64 = in.readLine()) != null) {
            String data = new String(Base64.getDecoder().decode(b64.trim()), StandardCharsets.UTF_8);
            for (String record : data.split(String.valueOf((char) 2))) {
                String[] f = record.split(String.valueOf((char) 1));
                StringBuilder out = new StringBuilder(f[0]);
                switch (f[0]) {
                    case "Pub":
                        out.append("\ttimeStamp=").append(Long.parseLong(f[1])).append("\tgroupName=").append(f[3])
                           .append("\ttopic=").append(f[4]).append("\tmsgId=").append(f[5]).append("\ttags=").append(f[6])
                           .append("\tkeys=").append(f[7]).append("\tstoreHost=").append(f[8])
                           .append("\tbodyLength=").append(Integer.parseInt(f[9])).append("\tcostTime=").append(Integer.parseInt(f[10]))
                           .append("\tmsgType=").append(ordinal(f[11]));
                        if (f.length == 13) out.append("\tsuccess=").append(Boolean.parseBoolean(f[12]));
                        else out.append("\toffsetMsgId=").append(f[12]).append("\tsuccess=").append(Boolean.parseBoolean(f[13]));
                        if (f.length >= 15) out.append("\tclientHost=").append(f[14]);
                        break;
                    case "SubBefore":
                        out.append("\ttimeStamp=").append(Long.parseLong(f[1])).append("\tgroupName=").append(f[3])
                           .append("\trequestId=").append(f[4]).append("\tmsgId=").append(f[5])
                           .append("\tretryTimes=").append(Integer.parseInt(f[6])).append("\tkeys=").append(f[7]);
                        break;
                    case "SubAfter":
                        out.append("\trequestId=").append(f[1]).append("\tmsgId=").append(f[2])
                           .append("\tcostTime=").append(Integer.parseInt(f[3])).append("\tsuccess=").append(Boolean.parseBoolean(f[4]))
                           .append("\tkeys=").append(f[5]);
                        if (f.length >= 7) out.append("\tcontextCode=").append(Integer.parseInt(f[6]));
                        if (f.length >= 9) out.append("\ttimeStamp=").append(Long.parseLong(f[7])).append("\tgroupName=").append(f[8]);
                        break;
                    case "EndTransaction":
                        if (!STATES.contains(f[11])) throw new IllegalArgumentException("state " + f[11]);
                        out.append("\ttimeStamp=").append(Long.parseLong(f[1])).append("\tgroupName=").append(f[3])
                           .append("\ttopic=").append(f[4]).append("\tmsgId=").append(f[5]).append("\tmsgType=").append(ordinal(f[9]))
                           .append("\ttransactionId=").append(f[10]).append("\ttransactionState=").append(f[11])
                           .append("\tfromTransactionCheck=").append(Boolean.parseBoolean(f[12]));
                        break;
                    default:
                        out.append("\tunknown");
                }
                System.out.println(out);
            }
        }
    }
}
